"""A CUDA device string given on the command line (FRY054, CUDA_IDIOMS 55): `--device cuda` / `--device cuda:N`.

After the parse of a `--device` string option, the migrated program maps a CUDA device string to the available
accelerator with the same index (tools.codemods.cli_device): on tpx `--device cuda` runs on tpx, `--device cpu`
stays on the CPU, and where no accelerator is (or CUDA is) the value is kept, so `--device cuda` still means
CUDA. Options the mapping cannot follow are left alone or for review.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tools.codemods.cli_device import CALL_COMMENT, HELPER_NAME
from tools.codemods.engine import analyze

FIXTURES = Path(__file__).parent / "fixtures" / "FRY054"
ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("program_runs", Path(__file__).with_name("program_runs.py"))
program_runs = importlib.util.module_from_spec(_spec)
sys.modules["program_runs"] = program_runs
_spec.loader.exec_module(program_runs)  # type: ignore[union-attr]
CALL = f"args.device = {HELPER_NAME}(args.device)"

# runs a program as __main__ and prints where its `model` ended up and the device string it parsed
_WHERE = """
import runpy, sys
sys.argv = sys.argv[1:]
g = runpy.run_path(sys.argv[0], run_name="__main__")
print("ran-on", next(g["model"].parameters()).device)
"""




def _run(path: Path, args: list[str], cwd: Path, *, tpx: bool) -> subprocess.CompletedProcess[str]:
    return program_runs.run_with(_WHERE, path, args, cwd, tpx=tpx)




ORIGINAL = FIXTURES / "cuda_string_option.in.py"


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture as this checkout's rules migrate it (its golden .out.py is checked in test_golden)."""
    path = tmp_path_factory.mktemp("migrated") / "migrated.py"
    path.write_text(analyze(ORIGINAL.read_text(encoding="utf-8")).new_source, encoding="utf-8")
    return path


@pytest.mark.parametrize(("args", "where"), [(["--device", "cuda"], "tpx:0"), (["--device=cuda:0"], "tpx:0"),
                                             (["--device", "cpu"], "cpu"), ([], "tpx:0")])
def test_on_tpx_a_cuda_device_string_selects_the_accelerator_and_cpu_stays_cpu(args, where, migrated, tmp_path):
    why = program_runs.tpx_missing()
    if why is not None:
        pytest.skip(why)
    run = _run(migrated, args, tmp_path, tpx=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-2:] == ["ran-on", where]
    if args and "cuda" in args[-1]:  # what the real case saw: the CUDA string reached .to() and failed
        original = _run(ORIGINAL, args, tmp_path, tpx=True)
        assert original.returncode != 0 and "Torch not compiled with CUDA enabled" in original.stderr


@pytest.mark.parametrize("args", [["--device", "cpu"], []])
def test_without_an_accelerator_the_migrated_program_runs_as_the_original(args, migrated, tmp_path):
    original = _run(ORIGINAL, args, tmp_path, tpx=False)
    migrated = _run(migrated, args, tmp_path, tpx=False)
    assert original.returncode == 0, original.stderr[-2000:]
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    assert migrated.stdout == original.stdout
    assert migrated.stdout.split()[-2:] == ["ran-on", "cpu"]


def test_without_an_accelerator_cuda_still_means_cuda(migrated, tmp_path):
    """No accelerator at all: the value is kept, so `--device cuda` fails as the original does (it asked for
    CUDA), rather than quietly running on the CPU."""
    original = _run(ORIGINAL, ["--device", "cuda"], tmp_path, tpx=False)
    migrated = _run(migrated, ["--device", "cuda"], tmp_path, tpx=False)
    assert original.returncode != 0 and migrated.returncode != 0
    assert "Torch not compiled with CUDA enabled" in migrated.stderr


HEAD = "import argparse\nimport torch\np = argparse.ArgumentParser()\n"
USE = "x = torch.ones(1).to(args.device)\ntorch.cuda.synchronize()\n"


@pytest.mark.parametrize(("options", "parse"), [
    ("p.add_argument('--device', type=str, default='cuda')", "args = p.parse_args()"),
    ("p.add_argument('-d', '--device', default='cpu', choices=['cpu', 'cuda'])", "args = p.parse_args(sys.argv[1:])"),
    ("p.add_argument('--device', action='store', help='cuda:N')", "args, rest = p.parse_known_args()"),
])
def test_the_mapping_follows_the_parse_once(options, parse):
    src = "import sys\n" + HEAD + options + "\n" + parse + "\n" + USE
    out = analyze(src, fixed_point=True).new_source
    assert f"{parse}\n{CALL_COMMENT}\n{CALL}\n" in out
    assert out.count(f"def {HELPER_NAME}(") == 1 and out.count(f"{HELPER_NAME}(args.device)") == 1
    assert analyze(out).new_source == out


def test_the_helper_uses_the_modules_alias_for_torch_and_is_defined_once_for_two_parses():
    src = ("import argparse\nimport torch as T\n\n\ndef main():\n    p = argparse.ArgumentParser()\n"
           "    p.add_argument('--device', default='cuda')\n    args = p.parse_args()\n"
           "    if args.device.startswith('cuda'):\n        T.cuda.synchronize()\n    return args\n\n\n"
           "def again(parser, argv):\n    args = parser.parse_args(argv)\n"
           "    return args.device\n")
    out = analyze(src).new_source
    assert out.count(f"def {HELPER_NAME}(") == 1
    assert out.count(CALL) == 2
    assert "accelerator = T.accelerator.current_accelerator(check_available=True)" in out
    assert "torch." not in out
    compile(out, "<migrated>", "exec")


@pytest.mark.parametrize("src", [
    # device not a string option: an index, a flag, several values
    HEAD + "p.add_argument('--device', type=int, default=0)\nargs = p.parse_args()\n" + USE,
    HEAD + "p.add_argument('--device', action='store_true')\nargs = p.parse_args()\n" + USE,
    HEAD + "p.add_argument('--device', nargs='+', default=['cuda'])\nargs = p.parse_args()\n" + USE,
    # choices without a CUDA device: `--device cuda` is refused by argparse itself
    HEAD + "p.add_argument('--device', choices=['cpu', 'tpx'])\nargs = p.parse_args()\n" + USE,
    # already generic: the mapping is there
    HEAD + f"p.add_argument('--device', default='cpu')\nargs = p.parse_args()\n{CALL}\n" + USE,
    # parsed, but its device never read back as <parsed>.device here
    HEAD + "p.add_argument('--device', default='cpu')\nargs = p.parse_args()\nrun(**vars(args))\n"
           "torch.cuda.synchronize()\n",
    # two --device options (two parsers): which parse belongs to which is not decided here
    HEAD + "p.add_argument('--device')\nq = argparse.ArgumentParser()\nq.add_argument('--device')\n"
           "args = p.parse_args()\n" + USE,
])
def test_no_mapping_where_the_option_is_not_a_device_string_or_already_mapped(src):
    outcome = analyze(src)
    assert outcome.new_source.count(HELPER_NAME) == src.count(HELPER_NAME)
    assert not [f for f in outcome.findings if f.rule_id == "FRY054" and "takes a device string" in f.message]


def test_a_device_option_read_back_but_parsed_elsewhere_is_left_for_review():
    src = (HEAD + "p.add_argument('--device', default='cuda')\n\n\ndef go(opts):\n"
           "    return torch.ones(1).to(opts.device)\n\n\ngo(p.parse_args())\n")
    outcome = analyze(src)
    assert HELPER_NAME not in outcome.new_source
    [review] = [f for f in outcome.remaining if f.rule_id == "FRY054"]
    assert review.category == "review" and "`--device cuda` fails where CUDA is absent" in review.message


def test_the_helpers_own_cuda_comparisons_are_not_reported_by_other_rules(migrated):
    out = migrated.read_text(encoding="utf-8")
    again = analyze(out)
    assert again.new_source == out and again.findings == []
    # the same comparisons outside Ferry's helper are reported (for review: FRY001 the string test, FRY062 the
    # device-type test): the exemption is the helper only
    outside = out.replace(f"def {HELPER_NAME}(", "def user_device(")
    found = analyze(outside).findings
    assert sorted(f.rule_id for f in found) == ["FRY001", "FRY062"] and {f.category for f in found} == {"review"}
