"""Dependencies of the routes: settings, the store, the workers, and the caller's identity (bearer tokens)."""

from __future__ import annotations

import hmac
import logging
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request, status

from agent.ids import id_problem
from agent.service.settings import LOCAL_OWNER, ServiceSettings
from agent.service.store import SessionRow, SessionStore
from agent.service.workers import Workers

logger = logging.getLogger(__name__)


def get_settings(request: Request) -> ServiceSettings:
    settings: ServiceSettings = request.app.state.settings
    return settings


def get_store(request: Request) -> SessionStore:
    store: SessionStore = request.app.state.store
    return store


def get_workers(request: Request) -> Workers:
    workers: Workers = request.app.state.workers
    return workers


SettingsDep = Annotated[ServiceSettings, Depends(get_settings)]
StoreDep = Annotated[SessionStore, Depends(get_store)]
WorkersDep = Annotated[Workers, Depends(get_workers)]


def _unauthorized(why: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, why, headers={"WWW-Authenticate": "Bearer"})


class BadToken(LookupError):
    """A request without the bearer token this server needs, or with a wrong one (the message says which)."""


def owner_for(settings: ServiceSettings, authorization: str | None) -> str:
    """The owner whose token ``authorization`` carries (``LOCAL_OWNER`` on a server with no tokens). Every
    configured token is compared, in constant time each, so the answer's timing does not tell which (or
    whether a prefix) matched; tokens are never logged. BadToken when it carries none of them."""
    if not settings.tokens:
        return LOCAL_OWNER
    if authorization is None:
        raise BadToken("this server needs 'Authorization: Bearer <token>' (a token from FERRY_API_TOKENS)")
    scheme, _, given = authorization.partition(" ")
    given_b = given.strip().encode()
    found: str | None = None
    for token, owner in settings.tokens.items():
        if hmac.compare_digest(given_b, token.encode()) and scheme.lower() == "bearer":
            found = owner
    if found is None:
        raise BadToken("wrong bearer token")
    return found


def owner_of(settings: SettingsDep, authorization: Annotated[str | None, Header()] = None) -> str:
    """The owner whose token the request carries (see :func:`owner_for`)."""
    try:
        return owner_for(settings, authorization)
    except BadToken as exc:
        raise _unauthorized(str(exc)) from None


OwnerDep = Annotated[str, Depends(owner_of)]


def session_of(sid: str, owner: OwnerDep, store: StoreDep) -> SessionRow:
    """The caller's session; another owner's is answered exactly like one that does not exist, and so is
    an id that is not a plain name (it is never looked up, nor turned into a path)."""
    problem = id_problem(sid)
    if problem is not None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no session {sid[:80]!r} on this server; the id is not a "
                                                       f"plain name ({problem})")
    row = store.get(sid, owner)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no session {sid[:80]!r} (of yours) on this server")
    return row


SessionDep = Annotated[SessionRow, Depends(session_of)]
