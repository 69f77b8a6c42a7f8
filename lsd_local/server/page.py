"""The chat page `lsd serve` serves at `/`: static files inside the package (web/), no build
step, nothing fetched from elsewhere. The page asks the API key itself, so it and its files
are public; everything it does goes through the OpenAI endpoints (with `lsd_rounds`: each
streamed chunk carries its round's origin spans and counts)."""

from __future__ import annotations

from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

WEB_DIR = Path(__file__).with_name("web")
FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
         "render.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
# the page runs only its own files: no inline script, nothing from another origin
HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                                      "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
           "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache",
           "Referrer-Policy": "no-referrer"}


def is_public(path: str) -> bool:
    """The page and its files need no API key (the page asks for it)."""
    return path == "/" or path.startswith("/static/")


async def index(request: Request) -> Response:
    return _file("index.html")


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in FILES or name == "index.html":  # (a fixed list: no path is ever joined)
        raise HTTPException(404, "no such file")
    return _file(name)


def _file(name: str) -> Response:
    return FileResponse(WEB_DIR / name, media_type=FILES[name], headers=HEADERS)


def page_routes() -> list[Route]:
    """`/` and `/static/<file>`."""
    return [Route("/", index, methods=["GET"]),
            Route("/static/{name}", static, methods=["GET"])]
