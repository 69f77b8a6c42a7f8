"""`lsd serve`: an OpenAI-compatible HTTP server (Starlette + uvicorn) in front of one engine
process. protocol.py: request bodies -> jobs; responses.py: response objects; worker.py: the
engine process; scheduler.py: queue, dispatch and restarts; app.py: endpoints; metrics.py:
Prometheus; main.py: listen, run, shut down. The library never imports this package."""
