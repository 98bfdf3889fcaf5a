"""CUDA redirect: original CUDA scripts run unchanged on cpu (and tpx), with a call-site log."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
import torch

from tools.redirect.cuda_api import DEVICE_COUNT_ENV, build_cuda_api
from tools.redirect.log import load_redirect_log
from tools.redirect.sites import SiteCounter
from tools.runner.api import run
from tools.runner.models import RunRequest

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def _losses(text: str) -> list[str]:
    return re.findall(r"^loss (\S+)$", text, re.M)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    art = tmp_path_factory.mktemp("art")
    cmd = "python cuda_train.py && python plain_train.py cpu"
    return run(RunRequest(path=SCRIPTS, command=cmd, device="cpu", redirect_cuda="cpu", artifacts_dir=art,
                          timeout_s=300))


def test_cuda_script_runs_unchanged_on_cpu(cpu_run):
    assert cpu_run.status == "ok", cpu_run.stderr_tail
    out = cpu_run.stdout_tail
    assert "devices cpu cpu" in out
    assert "loaded cpu" in out
    assert "legacy cpu torch.float32" in out
    losses = _losses(out)
    assert len(losses) == 6
    # Faithful: the redirected CUDA code computes exactly what device-agnostic code computes.
    assert losses[:3] == losses[3:]
    assert not (SCRIPTS / "ckpt.pt").exists()  # written in the private copy only


def _line_of(snippet: str) -> int:
    lines = (SCRIPTS / "cuda_train.py").read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if snippet in text)


def test_call_site_log_names_user_lines(cpu_run):
    _check_log(cpu_run, "patch")


@pytest.mark.slow
def test_function_mode_strategy_is_faithful_and_maps_device_objects(tmp_path):
    res = run(RunRequest(path=SCRIPTS, command="python cuda_train.py && python plain_train.py cpu", device="cpu",
                         redirect_cuda="cpu", artifacts_dir=tmp_path, timeout_s=300,
                         env={"FERRY_REDIRECT_STRATEGY": "mode"}))
    assert res.status == "ok", res.stderr_tail[-3000:]
    losses = _losses(res.stdout_tail)
    assert len(losses) == 6 and losses[:3] == losses[3:]
    _check_log(res, "mode")


def _check_log(result, strategy: str) -> None:
    assert result.redirect_log_path is not None
    records = load_redirect_log(result.redirect_log_path)
    by_api = {(r.api, r.line) for r in records if r.file == "cuda_train.py"}
    line_of = _line_of
    expected = {
        ("torch.cuda.is_available", line_of("assert torch.cuda.is_available()")),
        ("torch.cuda.manual_seed_all", line_of("manual_seed_all")),
        ("Module.cuda", line_of(").cuda()")),
        ("GradScaler(cuda)", line_of("GradScaler()")),
        ("torch.randn(device=)", line_of('torch.randn(32, 8, device="cuda")')),
        ("autocast(cuda)", line_of('torch.autocast("cuda"')),
        ("torch.cuda.Event", line_of("torch.cuda.Event(enable_timing=True)")),
        ("torch.cuda.synchronize", line_of("torch.cuda.synchronize()")),
        ("torch.cuda.FloatTensor", line_of("torch.cuda.FloatTensor(")),
        ("torch.cuda.nvtx.range_push", line_of("range_push")),
    }
    if strategy == "mode":
        expected.add(("torch.device", line_of('device = torch.device("cuda"')))
    else:
        expected.add(("Tensor.to", line_of(".to(device)")))
    assert expected <= by_api, sorted(by_api)
    assert all(r.mapped_to == "cpu" for r in records if r.file == "cuda_train.py")
    autocast = next(r for r in records if r.api == "autocast(cuda)")
    assert autocast.count == 3  # once per loop iteration, one record
    # Nothing from plain_train.py (no CUDA there) and no torch-internal sites.
    assert not [r for r in records if r.file == "plain_train.py"]
    assert not [r for r in records if "site-packages" in r.file]


def test_unmappable_features_fail_naming_the_call_site(tmp_path):
    res = run(RunRequest(path=SCRIPTS, command=["python", "unmappable.py"], device="cpu", redirect_cuda="cpu",
                         artifacts_dir=tmp_path, timeout_s=300))
    assert res.status == "failed"
    rows = {line.split(" | ")[0]: line for line in res.stdout_tail.splitlines() if " | " in line}
    assert set(rows) == {"graphed", "ext", "load", "triton"}, res.stdout_tail
    for row in rows.values():
        assert "ferry redirect:" in row and "unmappable.py:" in row, row
    assert "RedirectUnsupportedError" in rows["graphed"]
    assert "ModuleNotFoundError" in rows["triton"]
    # The final uncaught make_graphed_callables() is classified for the fix policy.
    assert res.trace is not None
    assert res.trace.signature.kind == "cuda_unmappable"
    assert res.trace.signature.op == "torch.cuda.make_graphed_callables"
    assert res.trace.location == f"unmappable.py:{len((SCRIPTS / 'unmappable.py').read_text().splitlines())}"


@pytest.mark.slow
def test_redirect_to_tpx_runs_on_tpx(tmp_path):
    cmd = "python cuda_train.py && python plain_train.py tpx"
    res = run(RunRequest(path=SCRIPTS, command=cmd, device="tpx", redirect_cuda="tpx", artifacts_dir=tmp_path,
                         timeout_s=300))
    assert res.status == "ok", res.stderr_tail[-3000:]
    assert "devices tpx tpx" in res.stdout_tail
    losses = _losses(res.stdout_tail)
    assert len(losses) == 6 and losses[:3] == losses[3:]
    records = load_redirect_log(res.redirect_log_path)
    assert {r.mapped_to for r in records if r.file == "cuda_train.py"} == {"tpx"}


def test_log_loader_merges_processes(tmp_path):
    log = tmp_path / "redirect.jsonl"
    rows = [
        {"event": "site", "file": "a.py", "line": 3, "api": "Tensor.cuda", "mapped_to": "cpu", "count": 1, "pid": 10},
        {"event": "final", "file": "a.py", "line": 3, "api": "Tensor.cuda", "mapped_to": "cpu", "count": 7, "pid": 10},
        {"event": "site", "file": "a.py", "line": 3, "api": "Tensor.cuda", "mapped_to": "cpu", "count": 1, "pid": 11},
        {"event": "site", "file": "b.py", "line": 1, "api": "torch.device", "mapped_to": "cpu", "count": 1, "pid": 11},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn": ')
    records = load_redirect_log(log)
    assert [(r.file, r.line, r.api, r.count, r.processes) for r in records] == [
        ("a.py", 3, "Tensor.cuda", 8, 2),
        ("b.py", 1, "torch.device", 1, 1),
    ]
    assert load_redirect_log(tmp_path / "missing.jsonl") == []


def test_distributed_dataloader_and_generator_idioms_on_cpu(tmp_path):
    res = run(RunRequest(path=SCRIPTS, command=["python", "dist_data.py"], device="cpu", redirect_cuda="cpu",
                         artifacts_dir=tmp_path, timeout_s=300))
    assert res.status == "ok", res.stderr_tail[-3000:]
    assert "backend gloo" in res.stdout_tail and "gen cpu" in res.stdout_tail and "done cpu" in res.stdout_tail
    apis = {r.api: r for r in load_redirect_log(res.redirect_log_path)}
    assert apis["init_process_group(nccl)"].mapped_to == "gloo"
    assert "DistributedDataParallel(device_ids)" in apis
    assert "torch.Generator(device=)" in apis
    # batch.cuda() runs in the main process on batches the two workers produced.
    assert apis["Tensor.cuda"].count == 2


def _redirected(tmp_path, script: str):
    res = run(RunRequest(path=SCRIPTS, command=["python", script], device="cpu", redirect_cuda="cpu",
                         artifacts_dir=tmp_path, timeout_s=120))
    assert res.status == "ok", res.stderr_tail[-3000:]
    return res, load_redirect_log(res.redirect_log_path)


def _script_line(script: str, snippet: str) -> int:
    lines = (SCRIPTS / script).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if snippet in text)


def test_pinned_host_memory_is_a_plain_copy_on_cpu(tmp_path):
    res, records = _redirected(tmp_path, "pinned.py")
    out = res.stdout_tail
    assert "batch cpu [[0, 1, 2, 3], [5, 6, 7, 8], [10, 11, 12, 13]]" in out
    assert "source [1.0, 1.0, 1.0] pinned [2.0, 2.0, 2.0]" in out
    assert "buffer (2, 3)" in out
    sites = {(r.api, r.line) for r in records}
    assert ("Tensor.pin_memory", _script_line("pinned.py", "x.pin_memory()")) in sites
    assert ("torch.empty(pin_memory=)", _script_line("pinned.py", "pin_memory=True")) in sites


def test_storage_cuda_in_a_map_location_loads_on_cpu(tmp_path):
    res, records = _redirected(tmp_path, "storage_cuda.py")
    assert "loaded cpu [0.0, 1.0, 2.0, 3.0] 7" in res.stdout_tail
    assert "typed cpu [0.0, 1.0, 2.0]" in res.stdout_tail
    load_line = _script_line("storage_cuda.py", "storage.cuda()")
    counts = {(r.api, r.line): r.count for r in records}
    assert counts[("Storage.cuda", load_line)] == 2  # once per saved storage
    assert ("Storage.cuda", _script_line("storage_cuda.py", "typed =")) in counts
    assert not (SCRIPTS / "best.pt").exists()


def test_a_model_built_on_meta_stays_on_meta_and_draws_as_on_cpu(tmp_path):
    # the factories' wrappers hid them from torch.device("meta")'s DeviceContext: the model was built on the
    # CPU, drawing its first init from the CPU generator, so the weights reset_parameters() drew after
    # to_empty() were not the ones an unredirected run draws (every FSDP2 meta-init reference was off)
    res, _ = _redirected(tmp_path, "meta_init.py")
    assert "built meta meta" in res.stdout_tail and "default meta" in res.stdout_tail
    torch.manual_seed(0)
    with torch.device("meta"):
        model = torch.nn.Linear(4, 3)
    model.to_empty(device="cpu")
    model.reset_parameters()
    assert f"init cpu {[round(v, 6) for v in model.weight.flatten().tolist()]}" in res.stdout_tail


def test_record_stream_accepts_the_redirect_streams(tmp_path):
    res, records = _redirected(tmp_path, "record_stream.py")
    assert "batch cpu 30.0" in res.stdout_tail
    assert "refused RuntimeError" in res.stdout_tail
    sites = {(r.api, r.line) for r in records}
    assert ("Tensor.record_stream", _script_line("record_stream.py", "x.record_stream(torch.cuda")) in sites


def test_legacy_cuda_type_checks_and_constructors_answer_as_on_cuda(tmp_path):
    res, records = _redirected(tmp_path, "legacy_types.py")
    out = res.stdout_tail
    assert "converted torch.float16 cpu torch.float64 cpu" in out
    assert "names torch.FloatTensor torch.HalfTensor" in out  # printed: torch's own answer
    assert "sizes (2, 3) (4,) (0,)" in out
    assert "values torch.float32 [[1.0, 2.0], [3.0, 4.0]]" in out
    assert "default torch.float64" in out
    sites = {(r.api, r.line) for r in records}
    line = functools.partial(_script_line, "legacy_types.py")
    assert {
        ("Tensor.type() == torch.cuda.FloatTensor", line('x.type() == "torch.cuda.FloatTensor"')),
        ("Tensor.type(torch.cuda.*)", line("torch.cuda.HalfTensor)")),
        ("Tensor.type(torch.cuda.*)", line("d = x.type(")),
        ("torch.cuda.FloatTensor", line("torch.Size([2, 3])")),
        ("torch.set_default_tensor_type", line("set_default_tensor_type")),
    } <= sites, sorted(sites)


def test_lstm_under_cuda_autocast_runs_in_float32_on_cpu(tmp_path):
    res, records = _redirected(tmp_path, "lstm_amp.py")
    out = res.stdout_tail
    losses = _losses_amp(out)
    assert len(losses) == 2 and losses[1] < losses[0], out
    # the LSTM computes in float32 (what it changed); the rest of the autocast region is kept
    assert out.count("lstm torch.float32 head torch.float16") == 2
    assert "same as float32 True" in out
    counts = {(r.api, r.line): r.count for r in records}
    line = _script_line("lstm_amp.py", "out, (h, c) = lstm(")
    assert counts[("autocast(cuda): nn.LSTM in float32", line)] == 2
    assert ("autocast(cuda): nn.LSTM in float32", _script_line("lstm_amp.py", "plain, _")) not in counts


def _losses_amp(text: str) -> list[float]:
    return [float(v) for v in re.findall(r"^loss (\S+) lstm", text, re.M)]


def test_cuda_graph_replays_the_captured_step_as_eager_training_does(tmp_path):
    res, records = _redirected(tmp_path, "cuda_graph.py")
    out = res.stdout_tail
    # capturing runs nothing (as on CUDA); each replay is one training step on the static tensors
    assert "capture True params unchanged True capturing after False" in out
    assert "same losses True same params True" in out, out
    g_losses = re.search(r"^graph losses (.*)$", out, re.M)
    assert g_losses is not None and len(set(g_losses.group(1).split())) == 6  # it trains: no stale loss
    counts = {(r.api, r.line): r.count for r in records}
    line = functools.partial(_script_line, "cuda_graph.py")
    assert counts[("torch.cuda.CUDAGraph", line("g = torch.cuda.CUDAGraph()"))] == 1
    assert counts[("torch.cuda.graph", line("with torch.cuda.graph(g)"))] == 1
    assert counts[("CUDAGraph.replay", line("g.replay()"))] == 6


def test_bf16_question_answers_as_the_targets_compute(tmp_path):
    """torch.cuda.is_bf16_supported() answered False under the redirect (torch's own check sees no GPU),
    so the reference chose float16 where the migrated code on tpx chooses bfloat16."""
    res, records = _redirected(tmp_path, "bf16_choice.py")
    assert "chose torch.bfloat16 computed torch.bfloat16" in res.stdout_tail, res.stderr_tail[-2000:]
    sites = {(r.api, r.line) for r in records}
    assert ("torch.cuda.is_bf16_supported", _script_line("bf16_choice.py", "is_bf16_supported")) in sites


# h, softmax, layer_norm, einsum, exp, sum: CUDA's policy lowers matmul and einsum, computes the rest in float32
CUDA_POLICY = "float16 float32 float32 float16 float32 float32"


def test_cuda_autocast_on_cpu_follows_cudas_cast_policy(tmp_path):
    """CPU autocast keeps softmax, layer_norm, exp and sum in float16 where CUDA computes them in float32
    (and does not lower einsum): the reference of a CUDA program computed under another policy than the
    program (and the target) has. Inside the redirected regions only: the program's own CPU autocast,
    a nested autocast(enabled=False) and other threads keep theirs."""
    res, records = _redirected(tmp_path, "amp_policy.py")
    out = res.stdout_tail
    assert f"cuda region {CUDA_POLICY}" in out, out
    assert f"legacy spelling {CUDA_POLICY}" in out, out
    assert "cuda off float32 float32 float32 float32 float32 float32" in out
    assert "cpu region float16 float16 float16 float16 float16 float16" in out  # CPU's own policy, untouched
    assert "outside float32 float32 float32 float32 float32 float32" in out
    assert "other thread float32 float32 float32 float32 float32 float32" in out
    sites = {(r.api, r.line) for r in records}
    assert ("autocast(cuda)", _script_line("amp_policy.py", 'torch.autocast("cuda", dtype')) in sites


def test_golden_run_disables_cuda_autocast_only(tmp_path):
    """FERRY_REDIRECT_AUTOCAST=off (the fp32 golden run): every CUDA autocast region computes in float32,
    and the log says so; the program's own CPU autocast is left as it is."""
    res = run(RunRequest(path=SCRIPTS, command=["python", "amp_policy.py"], device="cpu", redirect_cuda="cpu",
                         artifacts_dir=tmp_path, timeout_s=120, env={"FERRY_REDIRECT_AUTOCAST": "off"}))
    assert res.status == "ok", res.stderr_tail[-3000:]
    out = res.stdout_tail
    assert "cuda region float32 float32 float32 float32 float32 float32" in out, out
    assert "legacy spelling float32 float32 float32 float32 float32 float32" in out
    assert "cpu region float16 float16 float16 float16 float16 float16" in out
    apis = {r.api for r in load_redirect_log(res.redirect_log_path)}
    assert "autocast(cuda) disabled (fp32 golden run)" in apis and "autocast(cuda)" not in apis


def test_spawned_cuda_ddp_program_runs_on_cpu_with_two_processes(tmp_path):
    # device_count() // world_size, set_device, nccl with device_id=torch.device("cuda", rank), .cuda(ids[0]),
    # Module.to(rank), DDP(model, device_ids), barrier(device_ids): the original, two processes, on the CPU.
    res = run(RunRequest(path=SCRIPTS, command=["python", "ddp_spawn.py", "2"], device="cpu", redirect_cuda="cpu",
                         artifacts_dir=tmp_path, timeout_s=240, env={DEVICE_COUNT_ENV: "2"}))
    assert res.status == "ok", res.stderr_tail[-3000:]
    assert "count 2 n 1 backend gloo current 0 matches_one_process True ranks_agree True" in res.stdout_tail
    apis = {r.api: r for r in load_redirect_log(res.redirect_log_path)}
    assert apis["init_process_group(device_id)"].mapped_to == "None"
    assert apis["init_process_group(nccl)"].mapped_to == "gloo"
    assert apis["Module.to"].line == _script_line("ddp_spawn.py", "Linear(3, 2).to(rank)")
    assert apis["torch.cuda.set_device"].processes == 2


def test_device_count_covers_the_launchers_processes(monkeypatch):
    for name in ("LOCAL_WORLD_SIZE", "WORLD_SIZE", DEVICE_COUNT_ENV):
        monkeypatch.delenv(name, raising=False)
    api = build_cuda_api("cpu", SiteCounter(None, "cpu", None))
    assert api["device_count"]() == 1
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert api["device_count"]() == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun: processes on this node
    assert api["device_count"]() == 2
    monkeypatch.setenv(DEVICE_COUNT_ENV, "4")  # the runner's
    assert api["device_count"]() == 4
    api["set_device"](3)
    api["set_device"]("cuda:2")
    assert api["current_device"]() == 2
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        api["set_device"](torch.device("cuda", 4))
    monkeypatch.setenv(DEVICE_COUNT_ENV, "two")
    with pytest.raises(ValueError, match=DEVICE_COUNT_ENV):
        api["device_count"]()


def test_fsdp2_on_a_cuda_device_mesh_runs_on_cpu(tmp_path):
    # init_device_mesh("cuda", ...) positional and device_type=: a CPU mesh, so fully_shard finds the
    # parameters that .cuda() put on the CPU where the mesh says they are
    res, records = _redirected(tmp_path, "fsdp2_mesh.py")
    assert "mesh cpu cpu loss_matches True" in res.stdout_tail
    lines = sorted(r.line for r in records if r.api == "init_device_mesh(cuda)")
    assert lines == [_script_line("fsdp2_mesh.py", 'device_type="cuda"'),
                     _script_line("fsdp2_mesh.py", "positional =")]


def test_torch_accelerator_answers_for_cuda_under_the_redirect(tmp_path):
    # Without it, pytorch/examples' torch.accelerator scripts print that they need 2 GPUs and exit 0
    # in the reference run: nothing ran there to compare with.
    res = run(RunRequest(path=SCRIPTS, command=["python", "accelerator_queries.py"], device="cpu",
                         redirect_cuda="cpu", artifacts_dir=tmp_path, timeout_s=240, env={DEVICE_COUNT_ENV: "2"}))
    assert res.status == "ok", res.stderr_tail[-3000:]
    out = res.stdout_tail
    assert "Unable to locate" not in out
    assert "acc cuda backend nccl group gloo current 1 inside 0 after 1" in out
    assert "param cpu x cpu y cpu mem 0 total_positive True compiled [2.0, 2.0] batches [[0.0, 1.0], [2.0, 3.0]]" in out
    records = load_redirect_log(res.redirect_log_path)
    apis = {r.api: r for r in records}
    lines = {r.line for r in records if r.api == "torch.accelerator.is_available"}
    assert _script_line("accelerator_queries.py", "return torch.accelerator.is_available()") in lines
    assert _script_line("accelerator_queries.py", "compiled = scaled(") in lines  # asked while Dynamo traced it
    assert apis["torch.accelerator.set_device_index"].file == "accelerator_queries.py"
    assert apis["init_process_group(nccl)"].mapped_to == "gloo"
    # each of the program's torch.accelerator calls is logged once, as torch.accelerator's: the script
    # asks torch.cuda nothing (torch.compile's own questions at trace time aside)
    traced = _script_line("accelerator_queries.py", "compiled = scaled(")
    assert [r.api for r in records if r.api.startswith("torch.cuda.") and r.line != traced] == []
