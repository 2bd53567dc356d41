"""In-process `Capture` and the recording hooks (synthetic: a CPU predicate stands in for CUDA)."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from gpuadvisor.capture import Capture
from gpuadvisor.capture import hooks as hooks_mod
from gpuadvisor.capture.export import TraceExport


def _is_fake_device(t: Any) -> bool:
    # Synthetic: float64 tensors play the role of CUDA tensors on this CPU-only machine.
    return bool(t.dtype == torch.float64)


def _train(cap: Capture, steps: int, with_item: bool = True) -> None:
    model = torch.nn.Linear(8, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        x = torch.randn(4, 8).to(torch.float64)  # "host -> device"
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if with_item:
            loss.item()  # "host sync"
        cap.step()


def test_manual_steps_and_callsites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks_mod, "is_device_tensor", _is_fake_device)
    with Capture(tmp_path / "run", skip_steps=1, warmup_steps=1, active_steps=2, nvml=False) as cap:
        _train(cap, 6)
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert m["step_detection"] == "manual" and m["capture"]["state"] == "complete"
    assert m["traces"] == ["trace/rank0.json.gz"]
    cs = json.loads((tmp_path / "run" / "callsites.json").read_text())
    by_call = {c["call"]: c for c in cs["callsites"]}
    item = by_call["Tensor.item"]
    # Call sites are counted until the window ends (step 4 of 6): the wrappers are removed then.
    assert cs["steps_counted"] == 4 and cs["window_steps"] == 2
    assert item["count"] == 4 and item["count_in_window"] == 2 and item["per_step"] == 1.0 and item["code"] == 'loss.item()  # "host sync"'
    assert item["file"].endswith("test_inprocess.py") and item["function"] == "_train"
    h2d = by_call["Tensor.to"]
    assert h2d["kind"] == "host_to_device" and h2d["pinned"] is False and h2d["non_blocking"] is False
    assert h2d["bytes_per_call"] == 4 * 8 * 4 and h2d["dtype"] == "torch.float32"
    # torch's own internal .item()/.to() calls are not attributed to user code
    assert all(c["file"].endswith("test_inprocess.py") for c in cs["callsites"])


def test_print_of_device_tensor_is_one_callsite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(hooks_mod, "is_device_tensor", _is_fake_device)
    with Capture(tmp_path / "run", skip_steps=0, warmup_steps=0, active_steps=1, nvml=False) as cap:
        print(torch.ones(2, dtype=torch.float64))
        cap.step()
    calls = [c["call"] for c in json.loads((tmp_path / "run" / "callsites.json").read_text())["callsites"]]
    assert calls == ["Tensor.__repr__"]  # the .item()/.tolist() inside torch's printing is not counted again


def test_hooks_are_removed_after_capture(tmp_path: Path) -> None:
    before = torch.Tensor.__dict__.get("item")
    with Capture(tmp_path / "run", skip_steps=0, warmup_steps=0, active_steps=1, nvml=False) as cap:
        assert torch.Tensor.__dict__.get("item") is not before
        cap.step()
    assert torch.Tensor.__dict__.get("item") is before


def test_hook_exception_is_logged_once_and_disabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}

    def broken(t: Any) -> bool:
        calls["n"] += 1
        raise RuntimeError("synthetic hook bug")

    monkeypatch.setattr(hooks_mod, "is_device_tensor", broken)
    with Capture(tmp_path / "run", skip_steps=0, warmup_steps=0, active_steps=2, nvml=False) as cap:
        t = torch.ones(3)
        for _ in range(5):
            assert t.sum().item() == 3.0  # user code unaffected
        cap.step()
        cap.step()
    assert calls["n"] == 1  # disabled after the first failure
    log = (tmp_path / "run" / "gpuadvisor.log").read_text()
    assert log.count("hook host_sync Tensor.item failed and was disabled") == 1
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert any("synthetic hook bug" in x for x in m["messages"])


def test_settings_and_optimizer_recorded(tmp_path: Path) -> None:
    with Capture(tmp_path / "run", skip_steps=0, warmup_steps=0, active_steps=1, nvml=False) as cap:
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.randn(2, 4)).float().sum().backward()
        opt.step()
        cap.step()
    env = json.loads((tmp_path / "run" / "environment.json").read_text())
    ac = env["settings"]["autocast"]
    assert (
        ac["used"]
        and ac["count"] == 1
        and ac["dtypes"] == ["torch.bfloat16"]
        and ac["device_types"] == ["cpu"]
    )
    o = env["optimizers"][0]
    assert (o["class"], o["foreach"], o["lr"], o["param_tensors"], o["param_count"], o["steps"]) == (
        "AdamW",
        False,
        3e-4,
        2,
        20,
        1,
    )
    assert o["code"] == "opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)"


def test_disk_full_during_export_keeps_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(self: Any, src: Path, dst: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TraceExport, "gzip_with_dist_info", no_space)
    with Capture(tmp_path / "run", skip_steps=0, warmup_steps=0, active_steps=1, nvml=False) as cap:
        cap.step()
        cap.step()
    run = tmp_path / "run"
    m = json.loads((run / "manifest.json").read_text())
    assert "output_incomplete" in m["degraded"] and "trace_not_exported" in m["degraded"]
    assert any("No space left on device" in x for x in m["messages"])
    assert m["traces"] == [] and not list((run / "trace").iterdir())  # no half-written files
    assert (run / "environment.json").is_file()


@pytest.mark.parametrize(
    ("rc", "degraded", "status"),
    [
        (0, [], 0),
        (0, ["output_incomplete"], 74),
        (1, ["output_incomplete"], 1),
        (3, [], 3),
        (-2, [], 130),
        (-15, ["output_incomplete"], 143),
        (-9, [], 137),
    ],
)
def test_exit_status_for(rc: int, degraded: list[str], status: int) -> None:
    from gpuadvisor.capture.runner import exit_status_for

    assert exit_status_for(rc, degraded) == status


def test_existing_run_refused(tmp_path: Path) -> None:
    from gpuadvisor.errors import UsageError

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text('{"tool": {"name": "gpuadvisor"}}')  # a previous run
    # the API's own word (issue 42 item 9): there is no --force in a notebook
    with pytest.raises(UsageError, match=r"use force=True to overwrite it$"):
        Capture(tmp_path / "run", nvml=False).__enter__()


def test_the_api_profile_says_force_true(tmp_path: Path) -> None:
    import gpuadvisor
    from gpuadvisor.errors import UsageError

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text('{"tool": {"name": "gpuadvisor"}}')  # a previous run
    with pytest.raises(UsageError, match=r"already holds a previous run; use force=True to overwrite it$"):
        gpuadvisor.profile(script, out=tmp_path / "run")
    # a folder whose manifest.json is not ours is never a run, in the API's words too (issue 39)
    (tmp_path / "run" / "manifest.json").write_text("{}")
    with pytest.raises(UsageError, match=r"holds no gpuadvisor run.*\(force=True overwrites only a previous run"):
        gpuadvisor.profile(script, out=tmp_path / "run", force=True)
