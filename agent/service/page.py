"""The chat page (static/, plain HTML/CSS/JS) and the offline API docs, both served by the app itself:
nothing the browser loads comes from another host."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from agent.service.schemas import SessionCreate

STATIC = Path(__file__).parent / "static"
# Swagger UI's page starts itself with an inline script; nothing may come from another host.
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")


def swagger_assets() -> Path:
    """The fastapi-swagger package's copy of Swagger UI 5 (JS, CSS, favicon): Swagger UI 4 cannot render
    the OpenAPI 3.1 document FastAPI serves. Only its files are used, not its patching of the app."""
    return Path(str(files("fastapi_swagger") / "resources"))


# request bodies a route documents by hand (openapi_extra) with a $ref FastAPI does not add to the components
DOCUMENTED_BODIES: tuple[type[BaseModel], ...] = (SessionCreate,)


def complete_openapi(app: FastAPI) -> None:
    """Add the hand-documented bodies' schemas to the app's OpenAPI document, so that every $ref in it
    resolves (Swagger UI shows a resolver error over the page otherwise)."""
    made = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = made()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in DOCUMENTED_BODIES:
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in body.pop("$defs", {}).items():
                components.setdefault(name, sub)
            components.setdefault(model.__name__, body)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def mount_page(app: FastAPI) -> None:
    """GET / (the chat page), /static/* (its assets), /docs (Swagger UI from /static/docs/*)."""
    complete_openapi(app)
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
