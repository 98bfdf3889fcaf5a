"""A device held as a string stays a string (FRY001/FRY008/FRY053, CUDA_IDIOMS 53/54), and the device
variable is only named where no local binding shadows it (libcst scope analysis).

The migrated fixtures run on the CPU where the originals did (the same command line, the same
output), and also by default on a machine without CUDA, where the originals could not run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.codemods.engine import analyze

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
STRING = 'torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"'


def _run_on_cpu(path: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DEVICE_BACKEND_AUTOLOAD", "TPX_"))}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env)


# (fixture, the command line under which the original runs on the CPU)
CPU_RUNS = [
    ("FRY053/config_string_device", ["--device=cpu"]),
    ("FRY053/config_string_device", ["--device=cpu", "--batch_size=3"]),
    ("FRY053/condition_choice", ["--cpu"]),
    ("FRY008/string_selection", []),
]


@pytest.mark.parametrize(("case", "args"), CPU_RUNS, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_migrated_code_runs_on_cpu_where_the_original_did(case, args, tmp_path):
    src = FIXTURES / f"{case}.in.py"
    migrated = tmp_path / "migrated.py"
    migrated.write_text(analyze(src.read_text(encoding="utf-8")).new_source, encoding="utf-8")
    original = _run_on_cpu(src, args, tmp_path)
    assert original.returncode == 0, original.stderr[-2000:]
    after = _run_on_cpu(migrated, args, tmp_path)
    assert after.returncode == 0, after.stderr[-2000:]
    assert after.stdout == original.stdout and after.stdout.strip()


def test_migrated_config_runs_by_default_without_cuda_and_keeps_its_type_check(tmp_path):
    src = FIXTURES / "FRY053/config_string_device.in.py"
    migrated = tmp_path / "migrated.py"
    migrated.write_text(analyze(src.read_text(encoding="utf-8")).new_source, encoding="utf-8")
    assert _run_on_cpu(src, [], tmp_path).returncode != 0  # the original asks for CUDA
    default = _run_on_cpu(migrated, [], tmp_path)
    assert default.returncode == 0, default.stderr[-2000:]
    assert default.stdout.split()[:3] == ["str", "True", "True"]
    wrong = _run_on_cpu(migrated, ["--batch_size=two"], tmp_path)
    assert wrong.returncode != 0 and "invalid literal" in wrong.stderr


def _rewrite(src: str, **kw: object) -> str:
    return analyze(src, fixed_point=True, **kw).new_source  # type: ignore[arg-type]


def test_string_device_becomes_the_accelerator_type_name_not_a_torch_device():
    out = _rewrite("import torch\ndevice = 'cuda'\nx = torch.ones(1).cuda()\n")
    assert out == f"import torch\ndevice = {STRING}\nx = torch.ones(1).to(device)\n"


def test_an_index_is_kept_and_tpx_mode_pins_the_name():
    assert f'device = ({STRING}) + ":0"\n' in _rewrite("import torch\ndevice = 'cuda:0'\n")
    assert _rewrite("import torch\ndevice = 'cuda:0'\nd2 = 'cuda'\n", device_mode="tpx") == \
        'import torch\ndevice = "tpx:0"\nd2 = "tpx"\n'


def test_torch_is_imported_for_the_string_form_only_when_needed():
    assert _rewrite("device = 'cuda'\n") == f"import torch\n\ndevice = {STRING}\n"
    assert _rewrite("device = 'cuda'\n", device_mode="tpx") == 'device = "tpx"\n'


def test_device_type_of_a_string_device_goes_through_torch_device():
    out = _rewrite("import torch\ndevice = 'cuda'\ns = torch.cuda.amp.GradScaler()\nok = x.is_cuda\n")
    assert "s = torch.amp.GradScaler(torch.device(device).type)\n" in out
    assert "ok = x.device.type == torch.device(device).type\n" in out


@pytest.mark.parametrize(("line", "expected"), [
    ("t = 'cuda' in args.device", 't = torch.device(args.device).type != "cpu"'),
    ("t = 'cuda' not in self.device", 't = torch.device(self.device).type == "cpu"'),
    ("t = not device.startswith('cuda')", 't = not torch.device(device).type != "cpu"'),
    ("t = device.startswith('cuda') == flag", 't = (torch.device(device).type != "cpu") == flag'),
    ("if device_type == 'cuda':\n    pass", 'if torch.device(device_type).type != "cpu":\n    pass'),
    ("assert g['device_type'] != 'cuda'", "assert torch.device(g['device_type']).type == \"cpu\""),
    ("kind = 'cuda' if device.startswith('cuda') else 'cpu'", "kind = torch.device(device).type"),
    ("kind = 'cuda' if args.device == 'cuda' else 'cpu'", "kind = torch.device(args.device).type"),
    ("kind = ('cuda' if 'cuda' in cfg.device else 'cpu')", "kind = (torch.device(cfg.device).type)"),
])
def test_predicates_on_a_device_string_become_device_generic(line, expected):
    out = _rewrite(f"import torch\n{line}\n")
    assert out == f"import torch\n{expected}\n"


def test_the_rewritten_predicates_mean_not_the_cpu():
    out = _rewrite("import torch\nuses_gpu = 'cuda' in device\ndevice_type = 'cuda' if 'cuda' in device else 'cpu'\n"
                   "on_gpu = device_type == 'cuda'\n")
    for device, uses_gpu, kind in (("cpu", False, "cpu"), ("tpx", True, "tpx"), ("cuda:1", True, "cuda")):
        scope: dict[str, object] = {"device": device}
        exec(out, scope)
        assert (scope["uses_gpu"], scope["device_type"], scope["on_gpu"]) == (uses_gpu, kind, uses_gpu)


@pytest.mark.parametrize("line", [
    "t = 'cuda' in backends",            # a list of names, not a device
    "t = names[0].startswith('cuda')",   # not a name that holds a device
    "t = 'cuda' in devices[0]",         # a subscript: what it holds is not known
    "t = 'cuda:0' in device",            # an index: not a test of the device's type
    "t = x.device.type == 'cuda'",       # a tensor's device type: FRY001 reports it for review
    "t = g['mode'] == 'cuda'",           # a key that does not say device
])
def test_other_cuda_tests_are_not_rewritten_as_device_tests(line):
    assert analyze(f"import torch\n{line}\n").new_source == f"import torch\n{line}\n"


def test_an_inserted_device_variable_avoids_a_name_a_function_binds():
    src = ("import torch\n\n\ndef f(x, device=None):\n    return x.cuda()\n\n\n"
           "g = lambda device: torch.ones(1).cuda()\nh = [torch.ones(1).cuda() for device in range(2)]\n")
    out = _rewrite(src)
    assert "ferry_device = torch.accelerator" in out and "\ndevice = " not in out
    assert out.count(".to(ferry_device)") == 3


def test_a_local_device_of_another_kind_is_unbound_before_its_assignment(tmp_path):
    src = ("import torch\n\n\ndef f(x):\n    y = x.cuda()\n    device = y.device\n    return y.to(device)\n\n\n"
           "print(f(torch.ones(2)).sum().item())\n")
    out = _rewrite(src)
    assert "y = x.to(ferry_device)" in out
    path = tmp_path / "prog.py"
    path.write_text(out, encoding="utf-8")
    run = _run_on_cpu(path, [], tmp_path)
    assert run.returncode == 0 and run.stdout.strip() == "2.0", run.stderr[-2000:]


def test_a_users_device_shadowed_in_a_function_leaves_that_site_for_review():
    src = ("import torch\ndevice = torch.device('cuda')\n\n\n"
           "def f(x, device='cpu'):\n    return x.cuda().to(device)\n\n\n"
           "y = torch.ones(1).cuda()\n")
    outcome = analyze(src)
    assert "    return x.cuda().to(device)\n" in outcome.new_source
    assert "y = torch.ones(1).to(device)\n" in outcome.new_source
    [review] = [f for f in outcome.remaining if f.rule_id == "FRY002"]
    assert review.line == 6 and review.category == "review"
    assert "`device` is also bound here" in review.message


def test_a_local_cuda_device_of_the_same_name_is_still_named():
    src = 'import torch\n\ndef main():\n    device = torch.device("cuda")\n    return torch.ones(1).cuda()\n'
    out = _rewrite(src)
    assert "    return torch.ones(1).to(device)\n" in out and "ferry_device" not in out


def test_a_local_device_string_is_not_taken_for_the_device_object():
    src = ("import torch\n\n\ndef main():\n    device = 'cuda'\n    scaler = torch.cuda.amp.GradScaler()\n"
           "    return torch.ones(1).to(device), scaler\n\n\nprint(type(main()[1]).__name__)\n")
    out = _rewrite(src)
    assert "    scaler = torch.amp.GradScaler(ferry_device.type)\n" in out  # not device.type on a str
    assert f"    device = {STRING}\n" in out
