"""The registry's HTTP API (DESIGN §7; user contract in docs/API.md): `create_app(store, limits)`.

The app is assembled here from modules of one concern each:

    routes.py    the endpoints (jobs, runs, operations)
    params.py    what a request hands an endpoint: the registry context, the bearer key's
                 tenant (and the check run before a body is read), shared path and query
                 parameters
    body.py      request bodies: strict JSON, read only after authentication
    models.py    response models: what the OpenAPI schema promises
    errors.py    the two error shapes and the exception → answer mapping
    render.py    stored jobs and runs as response bodies
    cursors.py   opaque keyset cursors;  patch.py  JSON merge patch (RFC 7386)
    metrics.py   Prometheus collectors, the request log, the request body bound
    auth.py      bearer keys → tenants, with a short positive cache
    docs_page.py /docs: Swagger UI from the package, nothing from a CDN
    ops/routes.py  operators' cross-tenant endpoints (operator keys) and the /ui status page;
                 ops/routes_jobs.py its jobs view and actions; ops/routes_views.py one
                 job, one run, the dead letters and their replay
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from urllib.parse import quote

from fastapi import FastAPI
from starlette.responses import RedirectResponse
from starlette.routing import Match, Router
from starlette.types import Receive, Scope, Send

from tickwheel.clock import now_ms
from tickwheel.registry_api.auth import KeyCache
from tickwheel.registry_api.calendar_routes import calendars
from tickwheel.registry_api.docs_page import install as install_docs
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.errors import install_error_handlers
from tickwheel.registry_api.metrics import Metrics, Observe
from tickwheel.registry_api.ops.routes import install as install_ops
from tickwheel.registry_api.ops.routes_jobs import install as install_ops_jobs
from tickwheel.registry_api.ops.routes_views import install as install_ops_views
from tickwheel.registry_api.params import Registry
from tickwheel.registry_api.routes import jobs, operations
from tickwheel.registry_api.store import RegistryStore
from tickwheel.runtime import PartState

# A body may be twice the payload limit (pretty-printed JSON) plus room for the other fields.
BODY_OVERHEAD_BYTES = 64 * 1024
BODY_MIN_BYTES = 1 << 20  # bytes; the body limit never drops below this


def create_app(
    store: RegistryStore,
    limits: Limits,
    *,
    clock: Callable[[], int] = now_ms,
    parts: Mapping[str, PartState] | None = None,
    metrics: Metrics | None = None,
    csrf_secret: bytes | None = None,
) -> FastAPI:
    """The registry HTTP API over `store`; `clock` gives now in UTC milliseconds; `parts`, the
    process's health records, are reported (and a dead one fails) by /healthz; `metrics`, the
    process's collectors when other parts count into them too (the intake), served at /metrics;
    `csrf_secret`, the deployment's secret for the page's CSRF tokens (None: one
    drawn for this app)."""
    metrics = metrics or Metrics()
    app = FastAPI(
        title="tickwheel registry",
        version="1",
        description="Register, inspect and control scheduled jobs (see docs/API.md).",
        docs_url=None,  # /docs is docs_page.py's: FastAPI's loads Swagger UI from a CDN
        redoc_url=None,
    )
    app.state.registry = Registry(
        store, limits, clock, metrics, KeyCache(store.tenant_for_key), parts or {}
    )
    max_body = max(BODY_MIN_BYTES, 2 * limits.payload_limit_bytes + BODY_OVERHEAD_BYTES)
    app.add_middleware(Observe, metrics=metrics, max_body_bytes=max_body)
    install_error_handlers(app)
    app.include_router(jobs)
    app.include_router(operations)
    app.include_router(calendars)
    install_ops(app)  # /v1/ops/… and the /ui status page (ops/routes.py)
    install_ops_jobs(app, csrf_secret)  # the page's jobs list and actions (ops/routes_jobs.py)
    install_ops_views(app)  # one job, one run, the dead letters (ops/routes_views.py)
    install_docs(app)  # /docs, Swagger UI served from the package (docs_page.py)
    app.router.redirect_slashes = False
    app.router.default = SlashRedirect(app.router)
    return app


class SlashRedirect:
    """The router's answer to a path no route matches: when the same path with (or without)
    a trailing slash is a route, a 307 to it, else the router's 404.

    Starlette's own redirect builds an absolute URL from the request's `Host` header, so a
    client (or a cache in front of us) could be sent to any host the request named; this one
    answers with the path alone (and the query), leading slashes collapsed to one so that it
    can never read as `//other.host`.
    """

    def __init__(self, router: Router) -> None:
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] == "http" and path != "/":
            other = path.rstrip("/") if path.endswith("/") else path + "/"
            toggled = {**scope, "path": other}
            if any(route.matches(toggled)[0] is not Match.NONE for route in self.router.routes):
                location = quote("/" + other.lstrip("/"), safe="/:@!$&'()*+,;=-._~")
                if query := scope.get("query_string", b""):
                    location += "?" + query.decode("latin-1")
                await RedirectResponse(location, status_code=307)(scope, receive, send)
                return
        await self.router.not_found(scope, receive, send)
