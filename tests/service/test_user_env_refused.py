"""A session's ``options.env`` (JSON and multipart creates) is checked by the one rule of the user's
variables (``sandbox.userenv``): a loader or interpreter variable is a 422 naming it and why, nothing is
created, and nothing of the request ever loads a planted library (issue 34, item 1: session B's
``LD_PRELOAD`` pointed at a library session A had uploaded)."""

from __future__ import annotations

import importlib.util
import io
import json
import tarfile
from pathlib import Path

from service_client import create, write_repo

_spec = importlib.util.spec_from_file_location(
    "planted_library", Path(__file__).resolve().parents[1] / "sandbox" / "planted_library.py")
assert _spec is not None and _spec.loader is not None
planted = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(planted)

pytestmark = planted.requires_gcc


def _tar_gz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


DENIED = [("LD_PRELOAD", "dynamic loader"), ("LD_AUDIT", "dynamic loader"), ("PYTHONSTARTUP", "Python interpreter"),
          ("BASH_ENV", "shell"), ("GCONV_PATH", "C library"), ("FERRY_SEED", "Ferry's own")]


def test_a_loader_or_interpreter_variable_in_options_is_a_422(serve, tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    repo = write_repo(roots, "ok")
    markers = tmp_path / "markers"
    lib = planted.build_hook(repo, markers)  # a library in the repository itself, as session A uploaded it
    srv = serve("--allow-root", str(roots))
    c = srv.client
    for variable, why in DENIED:
        got = create(c, repo, env={variable: str(lib)})
        assert got.status_code == 422, got.text
        detail = got.json()["detail"][0]
        assert detail["loc"] == ["body", "options", "env"], detail
        assert variable in detail["msg"] and why in detail["msg"] and "Traceback" not in got.text
        options = json.dumps({"run": "python prog.py", "env": {variable: str(lib)}})
        up = c.post("/v1/sessions", files={"archive": ("repo.tar.gz", _tar_gz({"r/prog.py": b"print(1)\n"}),
                                                       "application/octet-stream")}, data={"options": options})
        assert up.status_code == 422, up.text
        assert variable in up.text and why in up.text and "Traceback" not in up.text
    assert c.get("/v1/sessions").json()["total"] == 0
    assert planted.markers_seen(markers) == []
