"""A real trace recorded by torch.profiler on the CPU in this test, plus resolve_input. GPU test marked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.metrics import compute_metrics
from gpuadvisor.runinfo import load_run_info, resolve_input
from gpuadvisor.trace.load import load_trace


def _record(path: Path, cuda: bool = False) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    dev = "cuda" if cuda else "cpu"
    model = torch.nn.Linear(64, 64).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(
        activities=acts,
        schedule=schedule(wait=0, warmup=1, active=4, repeat=1),
        record_shapes=True,
        with_flops=True,
    ) as prof:
        for _ in range(5):
            x = torch.randn(32, 64, device=dev)
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
            prof.step()
    prof.export_chrome_trace(str(path))


def test_real_cpu_trace(tmp_path: Path) -> None:
    path = tmp_path / "cpu.json"
    _record(path)
    m = load_trace(path)
    assert m.step_source == "profiler_step" and len(m.steps) == 4
    assert not m.has_gpu_kernels and m.kind is not None and m.kind.cpu_only and m.kind.is_training
    assert "aten::addmm" in set(m.cpu_ops["name"].astype(str))
    assert m.has_record_shapes
    mt = compute_metrics(m, None)
    assert mt.window["steps_analyzed"] == 3
    assert mt.window["step_time_ms"] is not None and mt.window["step_time_ms"] > 0
    assert mt.window["gpu_busy_fraction"] is None
    ops = mt.ops.set_index("name")
    assert (ops["self_us"] <= ops["total_us"] + 1e-9).all()
    json.dumps(mt.window, allow_nan=False)


@pytest.mark.gpu
def test_real_gpu_trace(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    path = tmp_path / "gpu.json"
    _record(path, cuda=True)
    m = load_trace(path)
    assert m.has_gpu_kernels and m.meta.num_sms
    w = compute_metrics(m, None).window
    assert w["gpu_busy_fraction"] is not None and 0 < w["gpu_busy_fraction"] <= 1
    assert w["scalar_reads_per_step"] is not None and w["scalar_reads_per_step"] >= 1


def test_resolve_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        resolve_input(tmp_path / "missing")
    bad = tmp_path / "x.txt"
    bad.write_text("x")
    with pytest.raises(InputError, match="not a trace"):
        resolve_input(bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no run directory"):
        resolve_input(empty)
    t = tmp_path / "traces"
    t.mkdir()
    (t / "rank1.json.gz").write_bytes(b"")
    (t / "rank0.json").write_text("{}")
    assert resolve_input(t) == ("folder", None, [t / "rank0.json", t / "rank1.json.gz"])
    assert resolve_input(t / "rank0.json") == ("trace", None, [t / "rank0.json"])
    run = tmp_path / "run"
    (run / "trace").mkdir(parents=True)
    (run / "manifest.json").write_text("not json")
    (run / "trace" / "rank0.json.gz").write_bytes(b"")
    kind, rd, paths = resolve_input(run)
    assert (kind, rd, paths) == ("run", run, [run / "trace" / "rank0.json.gz"])
    info = load_run_info(run)
    assert info.manifest == {} and info.nvml is None and info.nvml_reason == "nvml.csv.gz is missing"
    assert any("manifest.json could not be read" in n for n in info.notes)
