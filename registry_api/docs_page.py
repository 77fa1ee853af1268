"""`/docs`: the OpenAPI document (`/openapi.json`) drawn by Swagger UI, with nothing fetched
from elsewhere.

FastAPI's own `/docs` and `/redoc` load their scripts, styles and fonts from public CDNs: a
browser of an operator on an internal network would fetch code from a third party to show
our API, and fail without internet access. Swagger UI's files come instead from the package
`fastapi-offline` (its bundled copy, a dependency), the page's start-up script is ours and
served as a file, and a Content-Security-Policy allows scripts and fetches from this origin
only. `/redoc` is not served. Links are relative, so the page works under a path prefix.
"""

from __future__ import annotations

import functools
from importlib import resources

from fastapi import APIRouter, FastAPI
from starlette.responses import Response

from tickwheel.registry_api.errors import ApiError

ASSETS = {  # name → media type; served from fastapi_offline's static folder
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
}
START_JS = b"""window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
"""
PAGE = b"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tickwheel registry - API</title>
<link rel="stylesheet" href="docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="docs/swagger-ui-bundle.js"></script>
<script src="docs/start.js"></script>
</body>
</html>
"""
HEADERS = {
    # Swagger UI sets inline styles and shows images as data: URLs; scripts and fetches come
    # from this origin only.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

docs = APIRouter(include_in_schema=False)


@functools.cache
def _asset(name: str) -> bytes:
    return (resources.files("fastapi_offline") / "static" / name).read_bytes()


@docs.get("/docs")
async def docs_page() -> Response:
    return Response(PAGE, media_type="text/html; charset=utf-8", headers=HEADERS)


@docs.get("/docs/start.js")
async def docs_start() -> Response:
    return Response(START_JS, media_type="text/javascript; charset=utf-8", headers=HEADERS)


@docs.get("/docs/{name}")
async def docs_asset(name: str) -> Response:
    if name not in ASSETS:
        raise ApiError(404, "not_found", f"there is no file {name!r} under /docs")
    headers = {**HEADERS, "Cache-Control": "public, max-age=86400"}
    return Response(_asset(name), media_type=ASSETS[name], headers=headers)


def install(app: FastAPI) -> None:
    """Serve `/docs` on an app made with `docs_url=None, redoc_url=None`."""
    app.include_router(docs)
