"""REAL CUDA graph traces (GPU machine only, marked `gpu`): a stream capture and its replays recorded by
torch.profiler, then what the loader makes of them (TraceKind: captured launches dropped, graph
launches linked to the kernels they run) and what the rules say.

    python -m pytest -q -m gpu tests/trace/test_cuda_graph_gpu.py
    GPUADVISOR_KEEP_TRACES=$OUT python -m pytest -q -m gpu tests/trace/test_cuda_graph_gpu.py   # keep the traces
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import gpuadvisor
from gpuadvisor.trace.load import load_trace

pytestmark = pytest.mark.gpu


def _record(path: Path, *, capture_inside: bool) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from torch.profiler import ProfilerActivity, profile, schedule

    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)]).cuda()
    static_x = torch.randn(64, 512, device="cuda")
    graph = torch.cuda.CUDAGraph()

    def capture() -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):  # warm-up on a side stream, as torch.cuda.graphs requires
                model(static_x)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph), torch.no_grad():
            model(static_x)

    if not capture_inside:
        capture()
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=0, warmup=0, active=6, repeat=1),
    ) as prof:
        for step in range(6):
            if capture_inside and step == 2:
                capture()  # inside an analyzed step (not the first, outlier one)
            elif capture_inside and step < 2:
                with torch.no_grad():
                    model(static_x)
            else:
                graph.replay()
            torch.cuda.synchronize()
            prof.step()
    prof.export_chrome_trace(str(path))
    keep = os.environ.get("GPUADVISOR_KEEP_TRACES")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)


def test_real_graph_replays_link_one_launch_to_many_kernels(tmp_path: Path) -> None:
    path = tmp_path / "cuda_graph_replay.json"
    _record(path, capture_inside=False)
    m = load_trace(path)
    assert m.kind is not None and m.kind.vendor.value == "nvidia"
    assert m.kind.graph_launches >= 5 and m.kind.graph_kernels >= 5 * 8  # 8 GEMMs (+ bias) per replay
    launches = m.kernel_launches()
    assert (launches["launch_name"].astype(str).str.contains("GraphLaunch")).sum() >= 40
    result = gpuadvisor.analyze(path).to_dict()
    assert not [r for r in result["rules"] if r["status"] == "error"]
    assert any(n.startswith("CUDA graphs replayed:") for n in result["notes"])


def test_real_capture_inside_the_steps_is_not_gpu_work(tmp_path: Path) -> None:
    path = tmp_path / "cuda_graph_capture.json"
    _record(path, capture_inside=True)
    m = load_trace(path)
    assert m.kind is not None and m.kind.graph_capture_calls >= 1
    assert m.kind.captured_launches >= 8 and m.kind.capture_in_window
    result = gpuadvisor.analyze(path).to_dict()
    status = {r["rule"]: r for r in result["rules"]}
    for rule in ("GA401", "GA501"):
        assert status[rule]["status"] == "not_applicable"
        assert "graph capture in the analyzed steps" in status[rule]["detail"]
