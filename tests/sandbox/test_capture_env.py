"""Output caps and the environment allow-list (pure functions)."""

from __future__ import annotations

from sandbox.capture import CappedBuffer
from sandbox.env import filter_caller_env, is_secret_name, scrubbed_env


def test_capped_buffer_keeps_head_and_tail():
    buf = CappedBuffer(cap=10)
    for i in range(100):
        buf.feed(f"{i:03d}".encode())
    assert buf.total == 300
    assert bytes(buf.head) == b"00000"  # first 5 bytes
    assert bytes(buf.tail) == b"98099"
    assert buf.dropped == 290
    assert "290 bytes of output dropped" in buf.text()


def test_small_output_is_kept_whole():
    buf = CappedBuffer(cap=1024)
    buf.feed(b"hello\n")
    buf.feed(b"world\n")
    assert buf.text() == "hello\nworld\n" and buf.dropped == 0


def test_secret_names():
    for name in ("OPENAI_API_KEY", "FERRY_API_TOKEN", "FERRY_API_TOKENS", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN",
                 "DB_PASSWORD", "X_SECRET", "DEPLOY_KEYS", "FERRY_DATABASE_URL", "FERRY_SERVICE_DATABASE", "PG_DSN"):
        assert is_secret_name(name), name
    for name in ("FERRY_SEED", "TPX_CAPACITY", "PATH", "FERRY_DEVICE"):
        assert not is_secret_name(name), name


def test_scrubbed_env_is_an_allow_list():
    parent = {"PATH": "/evil", "HOME": "/root", "OPENAI_API_KEY": "k", "LANG": "C.UTF-8", "SSH_AUTH_SOCK": "/s"}
    env = scrubbed_env(parent, {"FERRY_SEED": "1", "FERRY_API_TOKEN": "t"})
    assert env["HOME"] == "/tmp" and env["PATH"] != "/evil"
    assert env["LANG"] == "C.UTF-8" and env["FERRY_SEED"] == "1"
    assert "OPENAI_API_KEY" not in env and "SSH_AUTH_SOCK" not in env and "FERRY_API_TOKEN" not in env


def test_caller_env_filter():
    kept, dropped = filter_caller_env({"FERRY_X": "1", "TPX_STRICT": "1", "PYTHONPATH": "/x", "FERRY_TOKEN": "t"})
    assert kept == {"FERRY_X": "1", "TPX_STRICT": "1"}
    assert sorted(dropped) == ["FERRY_TOKEN", "PYTHONPATH"]
