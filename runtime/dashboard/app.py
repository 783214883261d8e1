"""The dashboard's ASGI app (FastAPI): three pages, their JSON, and live streams (server-sent events).

Pages are static shells (``static/*.html``) that ``static/dashboard.js`` fills from the JSON
below, building every element with ``textContent`` -- text from a run (its directory name,
an error, an event) is never parsed as HTML -- and drawing the charts as SVG itself. Routes::

    GET  /                      runs list         GET /api/runs            rows (planner status --json's keys)
    GET  /runs/{name}           a run's page      GET /api/runs/{name}     its detail
                                (name: RUN, or QUEUE_DIR/JOB for a queue's job)
    GET  /quote                 the quote page    GET /api/jobs            jobs to quote
    GET  /api/stream            SSE: "runs" whenever a run's files change
    GET  /api/runs/{name}/stream  SSE: "run" whenever that run's files change
    POST /api/quote             {"job": id} or {"toml": text} -> planner quote --json's object
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from danlu.extras import require

require("fastapi", "dashboard", feature="planner dashboard")

# After the check above: without the extra, one line naming the pip install, not a traceback.
import anyio
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from planner.errors import PlannerError
from pricing.errors import PricingError
from runtime.dashboard import quotes
from runtime.dashboard.runs import RunNotFound, RunsDir, run_detail
from runtime.dashboard.security import SecurityMiddleware
from runtime.errors import RuntimeFailure

__all__ = ["DashboardConfig", "create_app"]

STATIC = Path(str(resources.files("runtime.dashboard") / "static"))
_ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css", "favicon.svg": "image/svg+xml"}
MAX_BODY = 2 << 20


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    runs_dir: Path
    token: str | None = None
    loopback: bool = True
    poll_s: float = 1.0  # how often the streams look at the files
    keepalive_s: float = 15.0  # an SSE comment this often, so proxies keep the stream open
    quote: quotes.QuoteSettings = field(default_factory=quotes.QuoteSettings)


def _finite(value: Any) -> Any:
    """JSON has no inf/nan (a forecast of a stalled run can be inf): they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _json(data: Any, status: int = 200) -> Response:
    body = json.dumps(_finite(data), default=str, allow_nan=False)
    return Response(body, status_code=status, media_type="application/json")


def create_app(config: DashboardConfig) -> Any:
    """The ASGI app serving ``config.runs_dir`` (wrapped in :class:`SecurityMiddleware`)."""
    runs = RunsDir(config.runs_dir)
    app = FastAPI(title="danlu dashboard", docs_url=None, redoc_url=None, openapi_url=None)

    def page(name: str) -> Callable[..., Any]:
        async def serve(request: Request) -> FileResponse:
            return FileResponse(STATIC / f"{name}.html", media_type="text/html; charset=utf-8",
                                headers={"cache-control": "no-store"})
        return serve

    app.add_api_route("/", page("index"), methods=["GET"], include_in_schema=False)
    # {name:path}: a queue's job is QUEUE_DIR/JOB (RunsDir.path checks every name)
    app.add_api_route("/runs/{name:path}", page("run"), methods=["GET"], include_in_schema=False)
    app.add_api_route("/quote", page("quote"), methods=["GET"], include_in_schema=False)

    @app.get("/static/{asset}", include_in_schema=False)
    async def static(asset: str) -> Response:
        if asset not in _ASSETS:
            return _json({"error": "no such file"}, 404)
        return FileResponse(STATIC / asset, media_type=_ASSETS[asset], headers={"cache-control": "no-cache"})

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")

    @app.get("/api/runs")
    async def list_runs() -> Response:
        return _json(await _rows(runs))

    @app.get("/api/stream")
    async def stream_runs(request: Request) -> StreamingResponse:
        async def changed() -> tuple[Any, Any]:
            sig = await run_in_threadpool(runs.signature)
            return sig, (lambda: _rows(runs))
        return _sse(request, "runs", changed, config)

    @app.get("/api/runs/{name:path}/stream")
    async def stream_run(name: str, request: Request) -> Response:
        try:
            runs.path(name)
        except RunNotFound as exc:
            return _json({"error": str(exc)}, 404)

        async def changed() -> tuple[Any, Any]:
            sig = await run_in_threadpool(lambda: runs.signature([name]))
            return sig, (lambda: _detail_or_error(runs, name))
        return _sse(request, "run", changed, config)

    # After .../stream, which this route would match too.
    @app.get("/api/runs/{name:path}")
    async def one_run(name: str) -> Response:
        try:
            return _json(await run_in_threadpool(lambda: run_detail(runs.view(name), name=name)))
        except RunNotFound as exc:
            return _json({"error": str(exc)}, 404)
        except RuntimeFailure as exc:
            return _json({"error": str(exc)}, 500)

    @app.get("/api/jobs")
    async def jobs() -> Response:
        return _json({"root": str(config.runs_dir), "jobs": await run_in_threadpool(quotes.job_choices,
                                                                                   config.runs_dir)})

    @app.post("/api/quote")
    async def quote(request: Request) -> Response:
        # JSON only: a form posted from another site (no CORS preflight) is refused.
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _json({"error": "send the job as JSON: {\"job\": ID} or {\"toml\": TEXT}"}, 415)
        body = await request.body()
        if len(body) > MAX_BODY:
            return _json({"error": "request too large; a job file is a page of settings"}, 413)
        try:
            data = json.loads(body)
        except ValueError as exc:
            return _json({"error": f"not JSON ({exc})"}, 400)
        if not isinstance(data, dict):
            return _json({"error": "send a JSON object: {\"job\": ID} or {\"toml\": TEXT}"}, 400)
        objective = data.get("objective") or None
        if objective not in (None, "cost", "time", "carbon"):
            return _json({"error": "objective is one of cost, time, carbon"}, 400)
        try:
            if isinstance(data.get("toml"), str):
                job, source = quotes.parse_pasted(data["toml"])
            elif isinstance(data.get("job"), str):
                job, source = await run_in_threadpool(quotes.load_choice, config.runs_dir, data["job"])
            else:
                return _json({"error": "give \"job\" (an id from /api/jobs) or \"toml\" (a job file's text)"}, 400)
            payload = await run_in_threadpool(lambda: quotes.quote_payload(job, source, config.quote,
                                                                           objective=objective))
        except (PlannerError, PricingError, RuntimeFailure) as exc:
            return _json({"error": str(exc)}, 400)
        return _json(payload)

    return SecurityMiddleware(app, token=config.token, loopback=config.loopback)


async def _rows(runs: RunsDir) -> dict[str, Any]:
    try:
        return await run_in_threadpool(runs.rows)
    except RuntimeFailure as exc:  # the runs directory itself is gone
        return {"root": str(runs.root), "runs": [], "broken": [], "error": str(exc)}


async def _detail_or_error(runs: RunsDir, name: str) -> dict[str, Any]:
    try:
        return await run_in_threadpool(lambda: run_detail(runs.view(name), name=name))
    except RuntimeFailure as exc:
        return {"error": str(exc)}


def _sse(request: Request, event: str, changed: Callable[[], Any], config: DashboardConfig) -> StreamingResponse:
    """An event ``event`` with the payload each time the watched files' signature changes."""

    async def frames() -> AsyncIterator[str]:
        last: Any = object()
        quiet = 0.0
        while not await request.is_disconnected():
            sig, build = await changed()
            if sig != last:
                last = sig
                data = json.dumps(_finite(await build()), default=str, allow_nan=False)
                yield f"event: {event}\ndata: {data}\n\n"
                quiet = 0.0
            elif quiet >= config.keepalive_s:
                yield ": keep-alive\n\n"
                quiet = 0.0
            await anyio.sleep(config.poll_s)
            quiet += config.poll_s

    return StreamingResponse(frames(), media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})

