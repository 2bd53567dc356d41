"""A REAL multi-process recording (not synthetic): 2 ranks of DDP on the CPU with the gloo backend,
torch.profiler in each rank exporting rankN.json.gz, then `gpuadvisor analyze FOLDER`."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
import torch.distributed as dist

from gpuadvisor.cli import cli as main

SCRIPT = Path(__file__).with_name("record_gloo_ddp.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _record(folder: Path, accum: int) -> Path:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(folder), str(_free_port()), str(accum)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in folder.iterdir()) == ["rank0.json.gz", "rank1.json.gz"]
    return folder


@pytest.mark.slow
@pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo"
)
def test_real_two_rank_gloo_ddp(tmp_path: Path) -> None:
    plain = _record(tmp_path / "plain", accum=1)
    accum = _record(tmp_path / "accum", accum=3)
    runner = CliRunner()

    out = runner.invoke(main, ["analyze", str(plain), "--format", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)  # stdout only: a slow load also says "analyzed in N s" on stderr
    assert data["source"]["ranks"] == [0, 1]
    status = {r["rule"]: r for r in data["rules"]}
    assert status["GA1001"]["status"] == "not_applicable"  # no NCCL kernels on the CPU
    assert "GPU kernels" in status["GA1001"]["detail"]
    assert status["GA1004"]["status"] == "ran"
    assert not [f for f in data["findings"] if f["rule"] == "GA1004"]  # one micro-batch per step
    assert not [f for f in data["findings"] if f["category"] not in ("communication", "capture")]

    # per-rank step times, from the real traces (gloo:all_reduce spans are the communication)
    from gpuadvisor.multirank import cross_rank
    from gpuadvisor.trace.load import load_trace

    cr = cross_rank([load_trace(plain / "rank0.json.gz"), load_trace(plain / "rank1.json.gz")])
    assert [r.rank for r in cr.ranks] == [0, 1]
    assert cr.common_steps == (3, 4, 5)  # steps 2..5 recorded, the first is an outlier
    for r in cr.ranks:
        assert r.comm_source == "host_spans"
        assert all(s.step_time_us > 0 and s.collectives >= 1 for s in r.analyzed)
        assert r.collective_kinds.get("all_reduce", 0) >= 3
        assert set(r.collective_bytes) == {(32 * 64 + 64 + 64 * 4 + 4) * 4.0}  # one bucket: every gradient

    html = tmp_path / "report.html"
    rep = runner.invoke(main, ["report", str(plain), "-o", str(html)])
    assert rep.exit_code == 0, rep.output
    text = html.read_text(encoding="utf-8")
    assert 'id="ranks"' in text and "rank 1" in text and "host spans (no GPU kernels)" in text

    # gradient accumulation over 3 micro-batches without no_sync(): all-reduce on every micro-batch
    acc = runner.invoke(main, ["analyze", str(accum), "--format", "json"])
    found = [f for f in json.loads(acc.stdout)["findings"] if f["rule"] == "GA1004"]
    assert len(found) == 1
    assert found[0]["evidence"]["micro_batches_per_optimizer_step"] == 3
