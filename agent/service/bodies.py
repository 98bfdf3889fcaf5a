"""The create request's body, read under the server's limits before anything parses it.

JSON (`path` + `options`) or multipart (`archive` file + `options` JSON text). The body is counted while
it streams in: past the limit the request ends with 413 and nothing more is read; a body that is not what
the route expects is a 4xx that says what was expected, never a 500 (binary bodies included).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from agent.service.schemas import SessionCreate, SessionOptions
from agent.service.settings import ServiceSettings

JSON_LIMIT = 1024**2  # a JSON create holds a path and options, never a repository
OPTIONS_LIMIT = 64 * 1024
MULTIPART_OVERHEAD = 64 * 1024  # boundaries, part headers and the options field beside the archive


@dataclass
class CreateBody:
    options: SessionOptions
    path: str | None = None
    archive: Path | None = None
    archive_name: str = "upload"  # the client's file name, as it said it (shown, never used as a path)


def _too_large(limit: int, what: str) -> HTTPException:
    return HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                         f"{what} is larger than this server accepts ({limit} bytes); "
                         "leave out data, checkpoints and build outputs, or ask the operator to raise the limit")


async def _limited(request: Request, limit: int, what: str) -> AsyncGenerator[bytes, None]:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit, what)
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise _too_large(limit, what)
        yield chunk


def _invalid(loc: tuple[str, ...], msg: str) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": msg}])


def _validation(exc: ValidationError, prefix: tuple[str, ...]) -> RequestValidationError:
    return RequestValidationError([{"type": e["type"], "loc": (*prefix, *map(str, e["loc"])), "msg": e["msg"]}
                                   for e in exc.errors()])


def _why(exc: BaseException) -> str:
    """What was wrong with a JSON text, in words that never quote it."""
    if isinstance(exc, RecursionError):
        return "it nests too deep"
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON at character {exc.pos}"
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8"
    return "a number in it has too many digits" if "digits" in str(exc) else "it cannot be read as JSON"


async def _json(request: Request) -> CreateBody:
    raw = b"".join([c async for c in _limited(request, JSON_LIMIT, "a JSON create body")])
    try:
        data: Any = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # ValueError: not JSON, not UTF-8, or a number too long
        raise _invalid(("body",), f"the body is not JSON we accept ({_why(exc)}); send {{'path': ..., 'options': "
                       "{...}} as application/json, or an archive as multipart/form-data (fields 'archive' and "
                       "'options')") from None
    try:
        body = SessionCreate.model_validate(data)
    except ValidationError as exc:
        raise _validation(exc, ("body",)) from None
    return CreateBody(options=body.options, path=body.path)


async def _multipart(request: Request, settings: ServiceSettings, tmp: Path) -> CreateBody:
    limit = settings.uploads.max_bytes + MULTIPART_OVERHEAD
    parser = MultiPartParser(request.headers, _limited(request, limit, "the upload"), max_files=1, max_fields=1,
                             max_part_size=OPTIONS_LIMIT)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"the multipart body is refused: {exc.message}; send "
                            "one file field 'archive' and one text field 'options'") from None
    try:
        archive, options = form.get("archive"), form.get("options")
        if not isinstance(archive, UploadFile):
            raise _invalid(("body", "archive"), "a multipart create needs the file field 'archive' (tar.gz or zip)")
        if not isinstance(options, str):
            raise _invalid(("body", "options"), "a multipart create needs the text field 'options' (JSON)")
        try:
            opts = SessionOptions.model_validate(json.loads(options))
        except ValidationError as exc:  # first: a ValidationError is a ValueError too
            raise _validation(exc, ("body", "options")) from None
        except (ValueError, RecursionError) as exc:
            raise _invalid(("body", "options"), f"the field 'options' is not JSON we accept ({_why(exc)})") from None
        dest = tmp / "upload"
        size = 0
        with dest.open("wb") as out:
            while chunk := await archive.read(1024**2):
                size += len(chunk)
                if size > settings.uploads.max_bytes:
                    raise _too_large(settings.uploads.max_bytes, "the archive")
                out.write(chunk)
        name = "".join(ch for ch in (archive.filename or "upload") if ch.isprintable())[:200] or "upload"
        return CreateBody(options=opts, archive=dest, archive_name=name)
    finally:
        await form.close()


async def read_create(request: Request, settings: ServiceSettings, tmp: Path) -> CreateBody:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        return await _json(request)
    if kind == "multipart/form-data":
        return await _multipart(request, settings, tmp)
    raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                        f"content type {kind[:60] or 'none'!r} is not accepted here; send application/json "
                        "({'path', 'options'}) or multipart/form-data ('archive', 'options')")
