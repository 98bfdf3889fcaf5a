"""The runner end to end: seeds, environment, statuses, traces, artifacts, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.runner.api import RunnerInputError, run
from tools.runner.models import RunRequest


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    src = tmp_path / "repo"
    src.mkdir()
    (src / "rng.py").write_text(
        "import os, random\nimport numpy as np\n"
        "print('R', random.random(), np.random.rand())\n"
        "print('ENV', sorted(k for k in os.environ if k.startswith(('FERRY_', 'TPX_', 'OPENAI', 'MY_'))))\n"
    )
    (src / "torch_rng.py").write_text("import torch\nprint('T', torch.rand(3).tolist())\n")
    (src / "bad.py").write_text("def f(:\n  pass\n")
    (src / "data.txt").write_text("original\n")
    return src


def _run(repo: Path, cmd, tmp_path: Path, **kw):
    return run(RunRequest(path=repo, command=cmd, device="cpu", artifacts_dir=tmp_path / "art", timeout_s=120, **kw))


def test_seed_is_fixed_and_env_is_filtered(repo: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-nope")
    env = {"FERRY_CUSTOM": "1", "TPX_STRICT": "0", "MY_TOKEN": "nope", "PATH": "/evil"}
    a = _run(repo, ["python", "rng.py"], tmp_path, seed=7, env=env)
    b = _run(repo, ["python", "rng.py"], tmp_path, seed=7)
    c = _run(repo, ["python", "rng.py"], tmp_path, seed=8)
    assert a.status == b.status == c.status == "ok", a.stderr_tail
    line = lambda r: next(x for x in r.stdout_tail.splitlines() if x.startswith("R "))  # noqa: E731
    assert line(a) == line(b) != line(c)
    envline = next(x for x in a.stdout_tail.splitlines() if x.startswith("ENV"))
    assert "'FERRY_CUSTOM'" in envline and "'TPX_STRICT'" in envline and "'FERRY_SEED'" in envline
    assert "OPENAI" not in envline and "MY_TOKEN" not in envline
    assert a.isolation in ("bwrap", "unshare", "rlimits") and a.seed == 7


def test_torch_is_seeded(repo: Path, tmp_path: Path):
    a = _run(repo, "python torch_rng.py", tmp_path, seed=3)
    b = _run(repo, "python torch_rng.py", tmp_path, seed=3)
    assert a.status == "ok", a.stderr_tail
    assert a.stdout_tail == b.stdout_tail and "T [" in a.stdout_tail


def test_syntax_error_trace(repo: Path, tmp_path: Path):
    res = _run(repo, ["python", "bad.py"], tmp_path)
    assert res.status == "failed" and res.exit_code == 1
    assert res.trace is not None and res.trace.signature.kind == "syntax_error"
    assert res.trace.location == "bad.py:1"
    saved = json.loads((tmp_path / "art" / "result.json").read_text())
    assert saved["trace"]["signature"]["kind"] == "syntax_error"


def test_timeout_status_and_signature(repo: Path, tmp_path: Path):
    res = run(RunRequest(path=repo, command="sleep 30", device="cpu", timeout_s=1, artifacts_dir=tmp_path / "a"))
    assert res.status == "timeout" and res.limit_hit == "timeout"
    assert res.trace is not None and res.trace.signature.kind == "timeout"


def test_original_untouched_and_workspace_kept_on_request(repo: Path, tmp_path: Path):
    res = _run(repo, "echo changed > data.txt && echo new > new.txt", tmp_path, keep_workspace=True)
    assert res.status == "ok"
    assert (repo / "data.txt").read_text() == "original\n" and not (repo / "new.txt").exists()
    assert res.workspace is not None and (res.workspace / "data.txt").read_text() == "changed\n"
    assert tmp_path / "art" in res.workspace.parents


def test_probe_and_profile_dirs_are_handed_to_the_child(repo: Path, tmp_path: Path):
    res = _run(repo, ["python", "-c",
                      "import os; print(os.environ['FERRY_PROBE_DIR'], os.environ['FERRY_PROFILE_DIR'])"],
               tmp_path, probe=True, profile=True)
    assert res.status == "ok", res.stderr_tail
    assert res.probe_dir is not None and res.profile_dir is not None
    # the child writes into its own dirs; the result names the host's copies of them (the run's are gone)
    child = tmp_path / "art" / "child"
    assert f"{child / 'probe'} {child / 'profile'}" in res.stdout_tail and not child.exists()
    assert res.probe_dir == tmp_path / "art" / "collected" / "probe"
    assert res.profile_dir == tmp_path / "art" / "collected" / "profile"
    assert res.probe_dir.is_dir() and res.profile_dir.is_dir()


def test_a_users_sandbox_package_is_the_one_a_probed_run_imports(tmp_path: Path):
    """The probe and profile hooks read their FERRY_* settings with Ferry's ``sandbox.envvars``
    inside the user's program: Ferry's ``sandbox`` must not be what the program's ``import sandbox``
    then finds (as for Ferry's ``tools``)."""
    src = tmp_path / "proj"
    (src / "sandbox").mkdir(parents=True)
    (src / "sandbox" / "__init__.py").write_text("WHO = 'user package'\n")
    (src / "use.py").write_text("import sandbox\nprint(sandbox.WHO, sandbox.__file__)\n")
    res = _run(src, "python use.py", tmp_path, probe=True, profile=True)
    assert res.status == "ok", res.stderr_tail
    assert "ferry bootstrap" not in res.stderr_tail  # both hooks installed
    assert res.stdout_tail.startswith("user package ") and res.stdout_tail.strip().endswith("sandbox/__init__.py")


def test_bad_input_is_a_clear_error(tmp_path: Path):
    with pytest.raises(RunnerInputError, match="not a directory"):
        run(RunRequest(path=tmp_path / "missing", command=["true"]))
    with pytest.raises(ValueError, match="command is empty"):
        RunRequest(path=tmp_path, command=[])


def test_cli_run_json_and_exit_codes(repo: Path, tmp_path: Path):
    ferry = [sys.executable, "-m", "agent.cli"]
    ok = subprocess.run([*ferry, "run", str(repo), "--device", "cpu", "--json", "--", "python", "-c", "print(42)"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["stdout_tail"].strip() == "42"
    bad = subprocess.run([*ferry, "run", str(repo), "--device", "cpu", "--", "python", "bad.py"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "signature: syntax_error" in bad.stdout
    usage = subprocess.run([*ferry, "run", str(repo)], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "no command given" in usage.stderr


def test_cli_doctor_reports_isolation(tmp_path: Path):
    out = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--json"], capture_output=True, text=True,
                         timeout=300)
    report = json.loads(out.stdout)
    assert report["isolation"]["level"] in ("bwrap", "unshare", "rlimits")
    assert report["isolation"]["level"] == report["isolation"]["available"][0]
    assert "torch" in report


def test_unavailable_isolation_is_a_sandbox_error(repo: Path, tmp_path: Path, monkeypatch):
    import sandbox.isolation as iso

    monkeypatch.setattr(iso, "detect", lambda: iso.IsolationInfo(level="rlimits", reasons=("bwrap missing (test)",),
                                                                 available=("rlimits",), drops_uid=False))
    res = run(RunRequest(path=repo, command=["true"], device="cpu", isolation="bwrap", artifacts_dir=tmp_path / "a"))
    assert res.status == "sandbox_error" and res.isolation == "none"
    assert "bwrap missing (test)" in res.error and "ferry doctor" in res.error
    # the weakest level still runs, and says so
    weak = run(RunRequest(path=repo, command=["true"], device="cpu", artifacts_dir=tmp_path / "b"))
    assert weak.status == "ok" and weak.isolation == "rlimits"
    assert weak.isolation_reasons == ["bwrap missing (test)"]


def test_pytest_run_reports_per_test_outcomes(tmp_path: Path):
    src = tmp_path / "proj"
    src.mkdir()
    (src / "test_m.py").write_text("def test_ok():\n    pass\n\n\ndef test_bad():\n    assert [1] == [2]\n")
    res = run(RunRequest(path=src, command="python -m pytest -q", device="cpu", artifacts_dir=tmp_path / "a",
                         timeout_s=120))
    assert res.status == "failed" and res.junit_xml is not None
    assert res.trace is not None and res.trace.origin == "pytest"
    assert {t.nodeid.split("::")[-1]: t.outcome for t in res.trace.tests} == {"test_ok": "passed", "test_bad": "failed"}
    assert res.trace.location == "test_m.py:6"


def _one_passing_pytest_file(tmp_path: Path, name: str, source: str) -> None:
    """Run pytest in the sandbox over a project holding just ``name``; its one test must pass."""
    src = tmp_path / "proj"
    src.mkdir(exist_ok=True)
    (src / name).write_text(source)
    res = run(RunRequest(path=src, command="python -m pytest -q", device="cpu", artifacts_dir=tmp_path / "a",
                         timeout_s=120))
    assert res.status == "ok", res.stdout_tail + res.stderr_tail
    assert "1 passed" in res.stdout_tail


def test_pytest_in_the_sandbox_does_not_load_ferrys_own_plugins(tmp_path: Path):
    """langsmith's (langgraph's) and hypothesis's (the dev extra's) pytest plugins ride along in
    Ferry's interpreter; a user's test run that does not use them must not pay for them (seconds per
    start) nor see them, while pytest's own plugins stay."""
    from tools.runner.env import FERRY_ONLY_PYTEST_PLUGINS

    # the names come from a text file: a project whose Python code names anyio keeps anyio's plugin
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "plugins.json").write_text(json.dumps(FERRY_ONLY_PYTEST_PLUGINS))
    _one_passing_pytest_file(tmp_path, "test_p.py", (
        "import json\nimport sys\n\n\ndef test_plugins(pytestconfig):\n"
        "    plugins = json.load(open('plugins.json'))\n"
        "    assert len(plugins) == 3\n"
        "    for name, package in plugins.items():\n"
        "        assert not pytestconfig.pluginmanager.has_plugin(name), name\n"
        "        assert package not in sys.modules, package\n"
        "    assert pytestconfig.pluginmanager.has_plugin('junitxml')\n"))


def test_a_project_that_imports_hypothesis_keeps_its_pytest_plugin(tmp_path: Path):
    pytest.importorskip("hypothesis")
    _one_passing_pytest_file(tmp_path, "test_h.py", (
        "from hypothesis import given, strategies as st\n\n\n@given(st.integers())\n"
        "def test_ints(pytestconfig, n):\n"
        "    assert pytestconfig.pluginmanager.has_plugin('hypothesispytest')\n"
        "    assert not pytestconfig.pluginmanager.has_plugin('langsmith_plugin')\n"
        "    assert isinstance(n, int)\n"))


def test_a_project_that_marks_tests_for_anyio_keeps_its_plugin_without_importing_it(tmp_path: Path):
    """anyio's plugin runs ``@pytest.mark.anyio`` coroutine tests; a project can use it without an import."""
    _one_passing_pytest_file(tmp_path, "test_a.py", (
        "import pytest\n\n\n@pytest.mark.anyio\nasync def test_awaits(pytestconfig):\n"
        "    assert pytestconfig.pluginmanager.has_plugin('anyio')\n"
        "    assert not pytestconfig.pluginmanager.has_plugin('langsmith_plugin')\n\n\n"
        "@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n"))


@pytest.mark.parametrize(("where", "text", "kept"), [
    ("tests/test_x.py", "import pytest\n\npytestmark = pytest.mark.anyio\n", True),
    ("conftest.py", "pytest_plugins = ['anyio']\n", True),
    ("pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-p anyio'\n", True),
    ("setup.cfg", "[tool:pytest]\nmarkers = anyio: async\n", True),
    ("tests/test_x.py", "# hypothesis: a comment naming packages does not import them\nimport torch\n", False),
    ("notes.txt", "anyio\n", False),  # neither Python nor pytest's configuration
])
def test_which_projects_keep_the_plugins_of_ferrys_interpreter(tmp_path: Path, where: str, text: str, kept: bool):
    from tools.runner.env import USED_BY_NAME, imports_anywhere, pytest_plugin_blocks

    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).write_text(text)
    found = imports_anywhere(tmp_path, {"anyio", "hypothesis", "langsmith"}, USED_BY_NAME)
    assert found == ({"anyio"} if kept else set()), found
    assert ("-p no:anyio" not in pytest_plugin_blocks(tmp_path)) is kept
    assert "-p no:langsmith_plugin" in pytest_plugin_blocks(tmp_path)


TRAIN_LOOP = """import torch
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(200):
    loss = net(torch.ones(2, 3)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    print("step", step, flush=True)
"""


@pytest.mark.parametrize("asked", [True, False])
def test_a_run_the_probe_ended_after_its_steps_is_reported_as_ended(tmp_path: Path, asked: bool):
    src = tmp_path / "proj"
    src.mkdir()
    (src / "train.py").write_text(TRAIN_LOOP)
    res = _run(src, "python train.py", tmp_path, probe=True, env={"FERRY_PROBE_END": "1"} if asked else {})
    if not asked:
        assert res.ok and res.ended_after_steps is None and "step 199" in res.stdout_tail
        return
    assert res.status == "ended" and not res.ok and res.trace is None, res.stderr_tail
    assert res.ended_after_steps == 2 and "step 199" not in res.stdout_tail
    assert res.probe_dir is not None and (res.probe_dir / "index.json").is_file()
