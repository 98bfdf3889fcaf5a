"""Uploads through the real server: a repository archive migrates; hostile archives are 400 with a reason,
oversized ones 413, and none leaves anything on the server."""

from __future__ import annotations

import io
import json
import stat
import tarfile
import zipfile
from collections.abc import Iterator

import httpx
import pytest
from service_client import PLAIN, Server, wait_state

OPTIONS = json.dumps({"run": "python prog.py"})


def tar_gz(members: dict[str, bytes], *, link: tuple[str, str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link is not None:
            name, target, kind = link
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tar.addfile(info)
    return buf.getvalue()


def zip_bytes(members: dict[str, bytes], symlink: tuple[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if symlink is not None:
            info = zipfile.ZipInfo(symlink[0])
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, symlink[1])
    return buf.getvalue()


def upload(c: httpx.Client, data: bytes, name: str = "repo.tar.gz", options: str = OPTIONS) -> httpx.Response:
    return c.post("/v1/sessions", files={"archive": (name, data, "application/octet-stream")},
                  data={"options": options})


def test_an_uploaded_repository_is_migrated_from_the_sessions_own_copy(serve) -> None:
    srv = serve("--workers", "1")
    c = srv.client
    marker = srv.data_dir.parent / "PWNED"  # a .git/config that would run a command: never unpacked
    git_config = f"[core]\n\tfsmonitor = touch {marker}; false\n".encode()
    got = upload(c, tar_gz({"myrepo-main/prog.py": PLAIN.encode(), "myrepo-main/README.md": b"hello\n",
                            "myrepo-main/.git/config": git_config, "myrepo-main/.git/HEAD": b"ref: refs/heads/main\n"}))
    assert got.status_code == 202, got.text
    sid = got.json()["id"]
    view = wait_state(c, sid, {"finished", "failed"})
    assert view["status"] == "migrated" and view["source"] == {"kind": "archive", "name": "repo.tar.gz", "files": 2}
    assert "current_accelerator" in c.get(f"/v1/sessions/{sid}/patch").text
    assert not marker.exists() and not (srv.data_dir / "sessions" / sid / "repo" / ".git").exists()
    zipped = upload(c, zip_bytes({"prog.py": PLAIN.encode()}), "repo.zip")
    assert zipped.status_code == 202, zipped.text


@pytest.fixture(scope="module")
def upload_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the refusals (each leaves it as it found it: that is what they check)."""
    srv = Server(tmp_path_factory.mktemp("uploads") / "data")
    yield srv
    srv.kill()


@pytest.mark.parametrize(("archive", "said"), [
    (tar_gz({"../evil.py": b"x"}), ".."),
    (tar_gz({"/abs/evil.py": b"x"}), "absolute"),
    (tar_gz({"prog.py": b"x"}, link=("passwd", "/etc/passwd", tarfile.LNKTYPE)), "link"),
    (tar_gz({"prog.py": b"x"}, link=("out", "/etc", tarfile.SYMTYPE)), "link"),
    (tar_gz({"prog.py": b"x"}, link=("dev", "", tarfile.CHRTYPE)), "device"),
    (zip_bytes({"../../evil.py": b"x"}), ".."),
    (zip_bytes({"/etc/cron.d/evil": b"x"}), "absolute"),
    (zip_bytes({"prog.py": b"x"}, symlink=("leak", "/etc/shadow")), "link"),
    (zip_bytes({"big.py": b"\0" * (30 * 1024**2)}), "bomb"),
    (b"just some bytes, not an archive" * 10, "archive"),
], ids=["tar-dotdot", "tar-absolute", "tar-hardlink", "tar-symlink", "tar-device", "zip-slip", "zip-absolute",
        "zip-symlink", "zip-bomb", "not-an-archive"])
def test_hostile_archives_are_refused_with_a_reason_and_leave_nothing(upload_server: Server, archive: bytes,
                                                                       said: str) -> None:
    srv = upload_server
    got = upload(srv.client, archive)
    assert got.status_code == 400, got.text
    assert said in got.json()["detail"].lower()
    assert srv.client.get("/v1/sessions").json()["total"] == 0
    sessions = srv.data_dir / "sessions"
    assert not sessions.exists() or not any(sessions.iterdir())
    assert not any(p.name.startswith("ferry-upload-") for p in srv.data_dir.iterdir())


def test_oversized_and_malformed_multipart_bodies_are_4xx(serve) -> None:
    srv = serve("--max-upload-mb", "1")
    c = srv.client
    big = upload(c, b"\0" * (2 * 1024**2))
    assert big.status_code == 413 and "larger than this server accepts" in big.json()["detail"]
    no_archive = c.post("/v1/sessions", data={"options": OPTIONS}, files={"other": ("x", b"y")})
    assert no_archive.status_code == 422 and no_archive.json()["detail"][0]["loc"] == ["body", "archive"]
    bad_options = upload(c, tar_gz({"prog.py": b"x"}), options="{not json")
    assert bad_options.status_code == 422 and bad_options.json()["detail"][0]["loc"] == ["body", "options"]
    wrong_field = upload(c, tar_gz({"prog.py": b"x"}), options=json.dumps({"run": "python prog.py", "out": "/etc"}))
    assert wrong_field.status_code == 422 and wrong_field.json()["detail"][0]["loc"] == ["body", "options", "out"]
    assert c.get("/v1/sessions").json()["total"] == 0
