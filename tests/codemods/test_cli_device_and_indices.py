"""Device choice on the command line (FRY054, CUDA_IDIOMS 55) and integer device indices (FRY055, 58).

The migrated fixtures run on the CPU where the originals did (the same command line, the same output), the
user can still ask for the CPU, and on tpx the default run lands on the accelerator. The rules leave what
they cannot decide for review, and never rewrite an integer or a flag that is not a device choice.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tools.codemods.engine import analyze

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("program_runs", Path(__file__).with_name("program_runs.py"))
program_runs = importlib.util.module_from_spec(_spec)
sys.modules["program_runs"] = program_runs
_spec.loader.exec_module(program_runs)  # type: ignore[union-attr]
AVAILABLE = "torch.accelerator.is_available()"

# runs a program as __main__ and prints the device type of its `model` (or `x`) afterwards
_WHERE = """
import runpy, sys
sys.argv = sys.argv[1:]
g = runpy.run_path(sys.argv[0], run_name="__main__")
obj = next(g[k] for k in ("model", "x", "data") if k in g)
t = next(obj.parameters()) if hasattr(obj, "parameters") else obj
print("ran-on", t.device.type)
"""




def _run(path: Path, args: list[str], cwd: Path, *, tpx: bool = False,
         extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return program_runs.run_with(_WHERE, path, args, cwd, tpx=tpx, extra_env=extra_env)


def _migrate(case: str, tmp_path: Path) -> Path:
    src = FIXTURES / f"{case}.in.py"
    out = tmp_path / "migrated.py"
    out.write_text(analyze(src.read_text(encoding="utf-8")).new_source, encoding="utf-8")
    return out




# (fixture, the command line of the original's CPU run, the migrated program's way of asking for the CPU)
CPU_RUNS = [
    ("FRY054/store_true_flag", [], ["--no-cuda", "--no-use-gpu"]),
    ("FRY054/set_defaults", [], ["--no-cuda"]),
    ("FRY054/device_option", [], ["--device", "cpu"]),
    ("FRY054/device_option", ["--device=cpu", "--no-cuda"], ["--device=cpu", "--no-cuda"]),
    ("FRY054/module_switch", [], []),
]


@pytest.mark.parametrize(("case", "args", "cpu_args"), CPU_RUNS,
                         ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_migrated_cli_runs_on_cpu_where_the_original_did_and_cpu_can_still_be_chosen(case, args, cpu_args, tmp_path):
    src = FIXTURES / f"{case}.in.py"
    migrated = _migrate(case, tmp_path)
    original = _run(src, args, tmp_path)
    assert original.returncode == 0, original.stderr[-2000:]
    assert original.stdout.strip().endswith("ran-on cpu")
    for run_args in (args, cpu_args):  # on a machine without an accelerator, and when the user asks for the CPU
        after = _run(migrated, run_args, tmp_path)
        assert after.returncode == 0, after.stderr[-2000:]
        assert after.stdout == original.stdout


@pytest.mark.parametrize(("case", "cpu_args"), [("FRY054/store_true_flag", ["--no-cuda"]),
                                                 ("FRY054/device_option", ["--device", "cpu"])])
def test_on_tpx_the_default_run_uses_the_accelerator_and_the_cpu_flag_still_works(case, cpu_args, tmp_path):
    why = program_runs.tpx_missing()
    if why is not None:
        pytest.skip(why)
    migrated = _migrate(case, tmp_path)
    default = _run(migrated, [], tmp_path, tpx=True)
    assert default.returncode == 0, default.stderr[-2000:]
    assert default.stdout.strip().endswith("ran-on tpx")
    forced = _run(migrated, cpu_args, tmp_path, tpx=True)
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert forced.stdout.strip().endswith("ran-on cpu")
    original = _run(FIXTURES / f"{case}.in.py", [], tmp_path, tpx=True)
    assert original.stdout.strip().endswith("ran-on cpu")  # what the issue saw: "migrated", but on the CPU


@pytest.mark.parametrize("rank", ["0", "1"])
def test_migrated_launcher_script_runs_on_cpu_for_any_rank(rank, tmp_path):
    migrated = _migrate("FRY055/launcher_rank", tmp_path)
    run = _run(migrated, [], tmp_path, extra_env={"LOCAL_RANK": rank})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [str(int(rank) + 1), "14.0", "ran-on", "cpu"]
    original = _run(FIXTURES / "FRY055/launcher_rank.in.py", [], tmp_path, extra_env={"LOCAL_RANK": rank})
    assert original.returncode != 0  # the original needs CUDA


def test_an_integer_device_default_stays_an_integer_and_runs_on_the_accelerator(tmp_path):
    out = (FIXTURES / "FRY055/int_default.out.py").read_text(encoding="utf-8")
    assert "device = 0  # the GPU to train on\n" in out
    assert "model = torch.nn.Linear(1, 1).to(torch.device(ferry_device.type, device))\n" in out
    run = _run(FIXTURES / "FRY055/int_default.out.py", [], tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["14.0", "1", "None", "torch.float32", "ran-on", "cpu"]
    if program_runs.tpx_missing() is None:
        on_tpx = _run(FIXTURES / "FRY055/int_default.out.py", [], tmp_path, tpx=True)
        assert on_tpx.returncode == 0, on_tpx.stderr[-2000:]
        assert on_tpx.stdout.split()[-1] == "tpx"


def _rewrite(src: str, **kw: object) -> str:
    return analyze(src, fixed_point=True, **kw).new_source  # type: ignore[arg-type]


HEAD = "import argparse\nimport torch\np = argparse.ArgumentParser()\n"


@pytest.mark.parametrize(("line", "expected"), [
    ('p.add_argument("--cuda", action="store_true")',
     f'p.add_argument("--cuda", action=argparse.BooleanOptionalAction, default={AVAILABLE})'),
    ("p.add_argument('--use_cuda', type=bool, default=False)",
     f"p.add_argument('--use_cuda', type=bool, default={AVAILABLE})"),
    ("p.add_argument('--no-cuda', action='store_true', default=True)",
     f"p.add_argument('--no-cuda', action='store_true', default=not {AVAILABLE})"),
    ("p.set_defaults(gpu=False)", f"p.set_defaults(gpu={AVAILABLE})"),
    ("p.add_argument('--device', default='cpu')\nuse = 'cuda' in p.parse_args().device",
     "p.add_argument('--device', default=torch.accelerator.current_accelerator().type if "
     "torch.accelerator.is_available() else \"cpu\")\nuse = torch.device(p.parse_args().device).type != \"cpu\""),
])
def test_device_switches_default_to_the_accelerator(line, expected):
    assert _rewrite(HEAD + line + "\n") == HEAD + expected + "\n"


def test_module_switch_and_tpx_mode():
    assert _rewrite("import torch\nUSE_CUDA = False\n") == f"import torch\nUSE_CUDA = {AVAILABLE}\n"
    out = _rewrite(HEAD + "p.add_argument('--device', default='cpu')\ntorch.cuda.synchronize()\n", device_mode="tpx")
    assert "p.add_argument('--device', default=\"tpx\")\n" in out


@pytest.mark.parametrize("line", [
    "p.add_argument('--no-cuda', action='store_true', default=False)",   # already the accelerator unless asked
    "p.add_argument('--no_cuda', action='store_true')",
    "p.add_argument('--cuda', action='store_true', default=True)",       # on by default already
    "p.add_argument('--device', default='cpu', help='cpu or cuda')",      # no CUDA path: only the help says it
    "p.add_argument('--seed', type=int, default=0)\ncuda_steps = False\n",
    "def f():\n    use_cuda = False\n    return use_cuda\n",                # a local, not a module default
    "p.add_argument('--backend', default='cpu')\nx = torch.ones(1).cuda()\n",  # not the device option
])
def test_what_is_not_a_cpu_default_is_left_alone(line):
    src = HEAD + line + "\n"
    outcome = analyze(src)
    assert not [f for f in outcome.findings if f.rule_id == "FRY054"]
    assert "BooleanOptionalAction" not in outcome.new_source and "default=torch" not in outcome.new_source


@pytest.mark.parametrize(("line", "why"), [
    ("p.add_argument('--cuda', action='store_true')\np.add_argument('--no-cuda', dest='off', action='store_true')",
     "--no-cuda already exists"),
    ("p.add_argument('--cuda', dest='gpu', action='store_true')\np.add_argument('--no-cuda', dest='gpu', "
     "action='store_false')", "another option stores into the same destination"),
    ("p.add_argument('--cuda', action='store_const', const=1)", "action='store_const'"),
    ("p.add_argument('--cuda', dest='gpu', action='store_true')\np.add_argument('--no-cuda', dest='cpu', "
     "action='store_true')", "--no-cuda already exists"),
    ("p.add_argument('-c', dest='cuda', action='store_true')", "it has no long option to negate"),
])
def test_undecidable_flags_are_left_for_review_with_the_reason(line, why):
    src = HEAD + line + "\n"
    outcome = analyze(src)
    assert outcome.new_source == src
    [review] = [f for f in outcome.remaining if f.rule_id == "FRY054"]
    assert review.category == "review" and why in review.message


def test_argparse_under_another_name_is_left_for_review():
    src = ("import argparse as ap\nimport torch\np = ap.ArgumentParser()\n"
           "p.add_argument('--cuda', action='store_true')\n")
    outcome = analyze(src)
    assert outcome.new_source == src
    assert any("argparse is imported under another name" in f.message for f in outcome.remaining)


def test_an_option_destination_named_cuda_is_not_a_device_string():
    src = HEAD + "p.add_argument('--gpu', dest='cuda', action='store_true')\np.set_defaults(cuda=True)\n"
    assert [f.rule_id for f in analyze(src).findings] == []


@pytest.mark.parametrize(("src", "expected"), [
    ("r = int(os.environ['RANK'])\ny = x.to(r)", "y = x.to(torch.device(device.type, r))"),
    ("def f(x, rank: int):\n    return x.to(rank)", "    return x.to(torch.device(device.type, rank))"),
    ("y = x.cuda(args.gpu)", "y = x.to(torch.device(device.type, args.gpu))"),
    ("y = torch.ones(1, device=args.local_rank)",
     "y = torch.ones(1, device=torch.device(device.type, args.local_rank))"),
    ("d = torch.device(local_rank)", "d = torch.device(device.type, local_rank)"),
    ("s = torch.load('f', map_location=rank)", "s = torch.load('f', map_location=torch.device(device.type, rank))"),
])
def test_integer_indices_map_to_the_accelerator_with_that_index(src, expected):
    out = _rewrite(f"import os\nimport torch\nx = torch.ones(1).cuda()\n{src}\n")
    assert expected + "\n" in out


@pytest.mark.parametrize(("src", "rule"), [
    ("gpu = 1\ny = x.cuda(gpu)", "FRY002"),                 # another ordinal: the target may have one device
    ("d = torch.device('cuda')\ny = x.cuda(d)", "FRY002"),  # a device object, not an index
    ("def f(x, local_rank):\n    return x.to(local_rank)", "FRY003"),  # .to of an unannotated parameter
    ("for rank in range(2):\n    y = x.to(rank)", "FRY003"),  # a loop variable: rebinding, not known
])
def test_what_is_not_known_to_be_an_index_stays_review(src, rule):
    source = f"import torch\nx = torch.ones(1)\n{src}\n"
    outcome = analyze(source)
    assert not [f for f in outcome.findings if f.rule_id == "FRY055"]
    assert any(f.rule_id == rule and f.category == "review" for f in outcome.remaining)


def test_plain_integers_and_a_rebound_int_are_not_indices():
    src = ("import torch\nsteps = 0\nint = float\nx = torch.ones(2).to(torch.int64)\ny = x + steps\n"
           "z = x.cuda(int(2))\n")
    assert not [f for f in analyze(src).findings if f.rule_id == "FRY055"]


def test_an_index_rule_that_does_not_run_is_not_deferred_to():
    src = "import torch\nlocal_rank = 0\ny = torch.ones(1).cuda(local_rank)\n"
    only = analyze(src, rule_ids={"FRY002"})
    assert [(f.rule_id, f.category) for f in only.findings] == [("FRY002", "review")]
    both = analyze(src)
    assert [(f.rule_id, f.category) for f in both.findings] == [("FRY055", "auto")]
