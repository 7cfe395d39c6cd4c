"""The memory explorer, served at ``/ui`` by the same process as REST and MCP.

A static page: ``app/ui/static`` holds ``index.html`` and its hashed, minified assets, built from
``ui/`` (npm packages, Cytoscape.js among them) by ``make ui`` and shipped inside the package, so
nothing is fetched at run time. The page calls only the REST verbs under ``/api``, with the API
key the user signs in with as its ``Authorization: Bearer`` header (kept in the tab's
``sessionStorage``, never in a URL): every view shows what that key's reader may read.

Headers: the page may load code, styles and data only from this origin, may not be framed, and
sends no referrer (``Content-Security-Policy``); ``index.html`` is revalidated on every load,
the hashed assets are cached for a year.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC = Path(__file__).parent / "static"
"""The built page: ``index.html`` and ``assets/`` (``make ui`` writes them)."""

PAGE_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
"""The page's Content-Security-Policy: nothing from another origin, no inline script or style
markup (styles set through the DOM, as the graph library does, are allowed), no form that
submits anywhere (the sign-in form is handled in the page: the key never goes into a URL)."""

PAGE_HEADERS = {
    "Content-Security-Policy": PAGE_POLICY,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
NOT_BUILT = "The explorer is not built: run `make ui`"


class _Assets(StaticFiles):
    """The hashed assets: a changed file gets a new name, so each name is cached for a year."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        """The file, with year-long caching and no content sniffing."""
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def mount_ui(app: FastAPI) -> None:
    """Serve the explorer: ``GET /ui`` (and ``/ui/``) is the page, ``/ui/assets/*`` its files.
    Not part of the OpenAPI document. Without a built page, ``/ui`` is a 404 saying to build
    it."""
    index = STATIC / "index.html"

    async def page() -> Response:
        if not index.is_file():
            return JSONResponse({"detail": NOT_BUILT}, status_code=404)
        return FileResponse(index, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    for path in ("/ui", "/ui/"):
        app.add_api_route(path, page, methods=["GET", "HEAD"], include_in_schema=False)
    app.mount("/ui/assets", _Assets(directory=STATIC / "assets", check_dir=False), name="ui")
