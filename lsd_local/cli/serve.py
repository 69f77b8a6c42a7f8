"""`lsd serve`: the OpenAI-compatible HTTP server (lsd_local/server)."""

from __future__ import annotations

import ipaddress
from dataclasses import replace

import click

from ..config import (
    MAX_PARALLEL,
    SERVE_HOST,
    SERVE_MAX_BODY,
    SERVE_MAX_QUEUE,
    SERVE_PARALLEL,
    SERVE_PORT,
    SERVE_SHUTDOWN_GRACE,
    STATE_CACHE,
    STATE_CACHE_MAX_BYTES,
)
from ..limits import SERVE_MAX_TOKENS_LIMIT, SERVE_REQUEST_TIMEOUT, SERVE_ROUND_TIMEOUT
from . import options as shared
from .generation import generation_kwargs

# `lsd run`'s options, but an answer runs until EOS, a stop string or a full context unless
# --max-tokens (or the request) says otherwise, as in llama-server and OpenAI's API
SERVE_SAMPLING_OPTIONS = [
    click.option("--max-tokens", type=click.IntRange(min=0), default=None,
                 help="Most tokens per answer when a request does not say (default: until "
                      "the context is full).")
] + shared.SAMPLER_OPTIONS + shared.CHAT_OPTIONS


def _serve_options(func):
    return shared.with_options([
        click.option("--host", default=SERVE_HOST, show_default=True,
                     help="Address to listen on. Anything but loopback should have an API key."),
        click.option("--port", type=click.IntRange(0, 65535), default=SERVE_PORT,
                     show_default=True, help="Port to listen on (0: any free port)."),
        click.option("--api-key", default=None, envvar="LSD_API_KEY", metavar="KEY",
                     help="Require `Authorization: Bearer KEY` on every endpoint but /health "
                          "(also from LSD_API_KEY)."),
        click.option("--alias", default=None, metavar="NAME",
                     help="Model name in /v1/models and responses (default: MODEL)."),
        click.option("--max-queue", type=click.IntRange(min=0), default=SERVE_MAX_QUEUE,
                     show_default=True,
                     help="Requests that may wait for the engine; more get 503 + Retry-After."),
        click.option("--max-body", type=click.IntRange(min=1024), default=SERVE_MAX_BODY,
                     show_default=True, help="Largest request body in bytes (413 above)."),
        click.option("--state-cache", type=click.IntRange(min=0), default=STATE_CACHE,
                     show_default=True,
                     help="Conversations whose KV state stays in RAM, so that alternating "
                          "clients are not prefilled again (0: off)."),
        click.option("--state-cache-mib", type=click.IntRange(min=0),
                     default=STATE_CACHE_MAX_BYTES >> 20, show_default=True,
                     help="RAM those saved states may take in all, in MiB."),
        click.option("--shutdown-grace", type=click.FloatRange(min=0),
                     default=SERVE_SHUTDOWN_GRACE, show_default=True, metavar="SECONDS",
                     help="On SIGTERM / Ctrl-C, how long in-flight answers may take to finish "
                          "before they end with an error."),
        click.option("--open", "open_page", is_flag=True,
                     help="Open the chat page (http://HOST:PORT/) in the default browser "
                          "once the model is loaded."),
        click.option("--cors-origin", multiple=True, metavar="ORIGIN",
                     help="Allow browser pages from ORIGIN (repeatable; '*' for any). "
                          "Default: only the server's own chat page."),
        click.option("--allowed-host", multiple=True, metavar="NAME",
                     help="Also answer requests whose Host header is NAME (repeatable; "
                          "'.example.com' for a domain and its subdomains; '*' for any). "
                          "Default: addresses, localhost and this machine's name."),
    ])(_limit_options(func))


def _limit_options(func):
    """What one request may take: tokens, time, a sequence of the context."""
    return shared.with_options([
        click.option("--max-tokens-limit", type=click.IntRange(min=1),
                     default=SERVE_MAX_TOKENS_LIMIT, show_default=True,
                     help="Most tokens one answer may have, whatever a request asks."),
        click.option("--request-timeout", type=click.FloatRange(min=0),
                     default=SERVE_REQUEST_TIMEOUT, show_default=True, metavar="SECONDS",
                     help="Longest time a request may take from its arrival (its answer then "
                          "ends with finish_reason length; 0: no limit)."),
        click.option("--parallel", "-np", type=click.IntRange(1, MAX_PARALLEL),
                     default=SERVE_PARALLEL, show_default=True, metavar="N",
                     help="Requests served side by side (llama-server's -np): each has its own "
                          "sequence of the context (--ctx tokens each) and one decode scores "
                          "them all; more wait in the queue."),
        click.option("--round-timeout", type=click.FloatRange(min=1),
                     default=SERVE_ROUND_TIMEOUT, show_default=True, metavar="SECONDS",
                     help="Watchdog: a request whose engine makes no progress this long "
                          "(stuck inside llama.cpp) fails and the engine is restarted."),
    ])(func)


@click.command()
@click.argument("model", required=False, metavar="[MODEL]",
                shell_complete=lambda ctx, param, incomplete: shared.complete_model(
                    ctx, param, incomplete))
@shared.with_options([shared.MODEL_OPTION] + shared.ENGINE_OPTIONS + SERVE_SAMPLING_OPTIONS)
@_serve_options
def serve(model: str | None, model_option: str | None, **opts) -> None:
    """Serve MODEL over an OpenAI-compatible HTTP API (/v1/chat/completions,
    /v1/completions, /v1/models; /health, /metrics) and a chat page at / (--open opens it).

    Takes `lsd run`'s model, speculation and sampling options as the defaults of every
    request; a request may override them with extra body fields (temperature, top_k, rule,
    drafter, k, theta, ...). Listens on 127.0.0.1:8080 unless told otherwise.

    \b
      lsd serve qwen2.5-coder-1.5b --port 8080
      curl localhost:8080/v1/chat/completions -H 'Content-Type: application/json' \\
        -d '{"messages": [{"role": "user", "content": "hi"}]}'
    """
    from ..server.app import ServerSettings
    from ..server.main import serve as run_server
    from ..server.protocol import Defaults
    from ..server.worker import WorkerSettings

    if model is not None and model_option is not None:
        raise click.UsageError("give MODEL or --model, not both")
    model = model_option or model
    shared.check_grammar_source(opts)
    target, draft, engine = shared.engine_arguments(model, opts, probe_devices=False)
    engine = replace(engine, load=engine.load.with_changes(n_seq=opts["parallel"]),
                     draft_load=engine.draft_load.with_changes(n_seq=opts["parallel"]))
    generate = generation_kwargs(opts)
    generate["stop"] = list(generate["stop"])
    defaults = Defaults(engine.drafter, engine.rule, generate, opts["system"],
                        opts["max_tokens_limit"], opts["request_timeout"] or None)
    _warn_if_open(opts["host"], opts["api_key"])
    worker = WorkerSettings(target, draft, engine, opts["state_cache"],
                            opts["state_cache_mib"] << 20)
    settings = ServerSettings(
        model_name=opts["alias"] or _model_name(model, target),
        defaults=defaults, api_key=opts["api_key"], cors_origins=tuple(opts["cors_origin"]),
        max_body=opts["max_body"], allowed_hosts=tuple(opts["allowed_host"]),
        host=opts["host"], round_timeout=opts["round_timeout"])
    run_server(worker, settings, opts["host"], opts["port"], opts["max_queue"],
               opts["shutdown_grace"], shared.notify, _open_browser if opts["open_page"] else None)


def _open_browser(url: str) -> None:
    import webbrowser

    if not webbrowser.open(url):
        shared.notify(f"no browser could be opened: visit {url}")


def _model_name(model: str | None, target) -> str:
    """A registry or Hub name as given; a path (or the default model) by its file name."""
    from ..models.registry import is_path

    return model if model is not None and not is_path(model) else target.name


def _warn_if_open(host: str, api_key: str | None) -> None:
    if api_key:
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        shared.notify(f"warning: listening on {host} without --api-key: anyone who can reach "
                      "this port can use the model")
