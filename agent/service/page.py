"""The chat page (static/, plain HTML/CSS/JS) and the offline API docs, both served by the app itself:
nothing the browser loads comes from another host."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
# Swagger UI's page starts itself with an inline script; nothing may come from another host.
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")


def swagger_assets() -> Path:
    """The swagger-ui-bundle package's copy of Swagger UI (JS, CSS, favicon)."""
    from swagger_ui_bundle import swagger_ui_path

    return Path(swagger_ui_path)


def mount_page(app: FastAPI) -> None:
    """GET / (the chat page), /static/* (its assets), /docs (Swagger UI from /static/docs/*)."""
    app.mount("/static/docs", StaticFiles(directory=swagger_assets()), name="swagger-ui")
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8",
                            headers={"Cache-Control": "no-cache"})

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        # validatorUrl: Swagger UI would fetch a badge from validator.swagger.io on any host but localhost
        page = get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} API",
                                   swagger_js_url="/static/docs/swagger-ui-bundle.js",
                                   swagger_css_url="/static/docs/swagger-ui.css",
                                   swagger_favicon_url="/static/docs/favicon-32x32.png",
                                   swagger_ui_parameters={"validatorUrl": None})
        page.headers["Content-Security-Policy"] = DOCS_CSP
        return page
