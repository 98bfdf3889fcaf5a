"""The throwaway Postgres server of the agent tests (tests/agent/pg_server.py) for the service tests: import
``postgres_server`` and ``pg_url`` from here into a test module (pytest finds fixtures in the module)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "pg_server_service"
if _NAME not in sys.modules:
    _path = Path(__file__).resolve().parents[1] / "agent" / "pg_server.py"
    _spec = importlib.util.spec_from_file_location(_NAME, _path)
    _module = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
    sys.modules[_NAME] = _module
    _spec.loader.exec_module(_module)  # type: ignore[union-attr]
pg_server = sys.modules[_NAME]
postgres_server = pg_server.postgres_server
pg_url = pg_server.pg_url
