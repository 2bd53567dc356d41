"""SYNTHETIC rule cases for GA303 (epoch-worker-restarts), GA304 (periodic-step-costs) and GA301's
"facts before remedies" path, built with tests.synth and a manifest whose `capture.step_ends` /
`step_events` are written the way the capture writes them (docs/capture.md, "Costs between steps").

Timed steps of 10 ms; window 12-21 (the defaults). The trace is a plain GPU-busy training loop: the
costs here are between steps, outside the analyzed window's median.
"""

from __future__ import annotations

from typing import Any

from tests.rules.cases.ga3_data_loading import _trace
from tests.rules.harness import Expect, RuleCase
from tests.synth import training_loop

T0 = 1_700_000_000.0


def _capture(durations_ms: list[float], events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    t, ends = T0, []
    for k, d in enumerate([0.0, *durations_ms], start=1):
        t += d / 1e3
        ends.append([k, round(t, 6)])
    cap: dict[str, Any] = {
        "skip_steps": 10, "warmup_steps": 2, "active_steps": 10, "first_recorded_step": 12,
        "last_recorded_step": 21, "state": "complete", "step_ends": ends, "speculation_end_step": 5,
    }  # fmt: skip
    if events is not None:
        cap.update(step_events=events, observe_steps=100, observe_seconds=20.0)
    return {"capture": cap}


def _at(durations_ms: list[float], step: int) -> float:
    """Wall time of boundary `step` in `_capture(durations_ms)` (boundary 1 at T0)."""
    return T0 + sum(durations_ms[: step - 1]) / 1e3


def _saves(seconds: float, device_bytes: int | None, file_bytes: int | None = None) -> list[dict[str, Any]]:
    """torch.save every 15 steps, with the bytes of the GPU tensors it held when given (recorded since
    issue 41) and the file's size (default: those bytes and 1000 more)."""
    return [
        {
            "kind": "checkpoint",
            "step": s,
            "start_unix_s": _at(FLAT, s) + 1e-4,
            "seconds": seconds,
            "bytes": file_bytes if file_bytes is not None else (device_bytes or 0) + 1000,
            **({"device_bytes": device_bytes} if device_bytes is not None else {}),
            "file": "train.py",
            "line": 88,
            "code": "torch.save(state, path)",
        }
        for s in (15, 30, 45)
    ]


LOADER = {
    "id": 0, "file": "train.py", "line": 30, "code": "loader = DataLoader(ds, batch_size=8, num_workers=8)",
    "batch_size": 8, "num_workers": 8, "pin_memory": True, "persistent_workers": False, "prefetch_factor": 2,
    "dataset_len": 64, "drop_last": False, "iterations": 40,
}  # fmt: skip


def _restarts(extra_ms: float, n: int = 48) -> list[float]:
    return [10.0 + (extra_ms if k % 8 == 0 else 0.0) for k in range(1, n + 1)]


def _restart_events(durations: list[float], each_s: float) -> list[dict[str, Any]]:
    base = {"dataloader": 0, "num_workers": 8, "persistent_workers": False}
    ev: list[dict[str, Any]] = [{"kind": "epoch_start", "epoch": 1, "step": None, "start_unix_s": T0 - 1, "seconds": 0.3, **base}]
    for e, s in enumerate(range(8, len(durations), 8), start=1):
        ev.append({"kind": "epoch_end", "epoch": e, "step": s, "start_unix_s": _at(durations, s) + 1e-4, "seconds": each_s / 4, **base})
        ev.append({"kind": "epoch_start", "epoch": e + 1, "step": s, "start_unix_s": _at(durations, s) + 2e-4,
                   "seconds": 3 * each_s / 4, "iter_s": each_s / 4, "first_batch_s": each_s / 2, **base})  # fmt: skip
    return ev


def _evaluations(durations: list[float], every: int, each_s: float, *, before: bool = True) -> list[dict[str, Any]]:
    ev: list[dict[str, Any]] = []
    if before:
        ev.append({"kind": "evaluation", "step": None, "start_unix_s": T0 - 2, "seconds": each_s, "forward_calls": 400})
    for s in range(every, len(durations), every):
        ev.append({"kind": "evaluation", "step": s, "start_unix_s": _at(durations, s) + 1e-4, "seconds": each_s,
                   "forward_calls": 400})  # fmt: skip
    return ev


FLAT = [10.0] * 48

CASES = [
    # GA303: 80 ms every 8 steps of 10 ms (recorded events): 10 ms per step of a 20 ms mean step, of
    # which persistent workers remove the epoch's end (20 ms) and the iterator's creation (20 ms), not
    # the first batch (40 ms): 5 ms per step, 25% of the run
    RuleCase(
        "GA303-fires-on-workers-restarted-every-epoch",
        "GA303",
        lambda: training_loop(6),
        environment={"dataloaders": [LOADER]},
        manifest=_capture(FLAT, _restart_events(FLAT, 0.08)),
        expect=Expect(
            fires=True,
            severity="high",
            impact_min=0.24,
            impact_max=0.26,
            message_contains=("the first batch then took 40.0 ms more",),
            title_contains=("restart every epoch",),
            recommendation_contains=("persistent_workers=True",),
            location_contains=("train.py:30",),
            evidence_keys=("restart_ms_each", "period_steps", "steps_observed"),
        ),
    ),
    # GA303 on a run recorded before the events: periodic slow steps at the loader's epoch length
    RuleCase(
        "GA303-fires-on-periodic-slow-steps-of-an-older-run",
        "GA303",
        lambda: training_loop(6),
        environment={"dataloaders": [LOADER]},
        manifest=_capture(_restarts(80.0)),
        expect=Expect(fires=True, impact_min=0.49, impact_max=0.51, message_contains=("slow steps",)),
    ),
    RuleCase(
        "GA303-quiet-with-persistent-workers",
        "GA303",
        lambda: training_loop(6),
        environment={"dataloaders": [{**LOADER, "persistent_workers": True}]},
        manifest=_capture(_restarts(80.0)),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA303-quiet-on-steady-steps",
        "GA303",
        lambda: training_loop(6),
        environment={"dataloaders": [LOADER]},
        manifest=_capture(FLAT, []),
        expect=Expect(fires=False),
    ),
    # GA304: a 400-call evaluation of 0.5 s every 10 steps of 10 ms: 50 ms per step of a 60 ms mean
    RuleCase(
        "GA304-fires-on-evaluation-every-n-steps",
        "GA304",
        lambda: training_loop(6),
        manifest=_capture(FLAT, _evaluations(FLAT, 10, 0.5)),
        expect=Expect(
            fires=True,
            severity="high",
            impact_min=0.82,
            impact_max=0.84,
            title_contains=("Evaluation every 10 steps",),
            recommendation_contains=("Evaluate less often",),
        ),
    ),
    RuleCase(
        "GA304-quiet-on-an-evaluation-seen-once",
        "GA304",
        lambda: training_loop(6),
        manifest=_capture(FLAT, _evaluations(FLAT[:9], 10, 0.5)),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA304-fires-on-checkpoints",
        "GA304",
        lambda: training_loop(6),
        manifest=_capture(FLAT, _saves(0.2, None, file_bytes=600_000_000)),
        expect=Expect(
            fires=True,
            title_contains=("Checkpoint saving",),
            recommendation_contains=("in the background",),
            location_contains=("train.py:88",),
            message_contains=("600.0 MB",),
        ),
    ),
    # a background save keeps its copy to pinned memory on the step (no pinned copy in the trace, no
    # NVML: 22 GB/s): 2 GB take ~91 ms of each 200 ms save; the rest runs during the 15 steps (150 ms)
    RuleCase(
        "GA304-prices-a-background-save-by-its-copy-to-pinned-memory",
        "GA304",
        lambda: training_loop(6),
        manifest=_capture(FLAT, _saves(0.2, 2_000_000_000)),
        expect=Expect(
            fires=True,
            impact_min=0.25,
            impact_max=0.40,
            message_contains=("copy to pinned memory stays on the step: 2.00 GB (its GPU tensors)",),
        ),
    ),
    # a 500 ms save of 0.2 GB: the write outlasts the 15 steps to the next save, which waits for it
    RuleCase(
        "GA304-a-background-write-longer-than-the-save-period-makes-the-next-save-wait",
        "GA304",
        lambda: training_loop(6),
        manifest=_capture(FLAT, _saves(0.5, 200_000_000)),
        expect=Expect(fires=True, impact_min=0.15, impact_max=0.30, message_contains=("the next save waits",)),
    ),
    RuleCase(
        "GA304-unknown-cause-is-reported-without-a-modeled-gain",
        "GA304",
        lambda: training_loop(6),
        manifest=_capture([10.0 + (50.0 if k % 6 == 0 else 0.0) for k in range(1, 49)]),
        expect=Expect(fires=True, title_contains=("gain not modeled",), evidence_keys=("gain_modeled",)),
    ),
    # GA301, facts before remedies: a single-process loader on a 2-CPU machine (one worker suggested)
    RuleCase(
        "GA301-reports-a-large-wait-more-workers-do-not-remove",
        "GA301",
        lambda: _trace(8000, multiprocessing=True),
        environment={"cpu_count": 8, "dataloaders": [{**LOADER, "num_workers": 8, "persistent_workers": True}]},
        expect=Expect(fires=True, min_severity="high", impact_min=0.7, title_contains=("gain not modeled",)),
    ),
]


def _restart_window() -> Any:
    """Steps 12-16 of 10 ms (a GEMM each), step 16 an epoch restart of 90 ms: the host in DataLoader
    __next__ for 10 ms (the epoch's last call: the workers shut down), 40 ms with no DataLoader span
    (the new iterator starts its workers), 30 ms for the new epoch's first batch, then the step."""
    from tests.synth import K_NVJET_BF16, SyntheticTrace

    st = SyntheticTrace()
    t = 0.0
    for n in range(12, 17):
        dur = 90_000.0 if n == 16 else 10_000.0
        st.add_step(n, cpu_start=t, cpu_dur=dur, gpu_dur=dur, gpu_start=t)
        if n == 16:
            st.add_dataloader_wait(ts=t + 10, dur=10_000, multiprocessing=True)
            st.add_dataloader_wait(ts=t + 50_010, dur=30_000, multiprocessing=True)
        k0 = t + dur - 9_000
        st.add_kernel(K_NVJET_BF16, ts=k0, dur=8_500, launch_ts=k0 - 10, op="aten::mm")
        t += dur
    return st


CASES.append(
    # An older run (no epoch records): 80 ms of excess every 8 steps of 10 ms; the recorded restart step
    # shows 10 ms shut-down + 40 ms creation before a 30 ms first batch: persistent workers remove
    # 50/80 of it. Mean step 10 + 10 = 20 ms; without the removable part 20 - 6.25 = 13.75: 31%.
    RuleCase(
        "GA303-older-run-priced-by-the-restart-step-in-the-window",
        "GA303",
        _restart_window,
        environment={"dataloaders": [LOADER]},
        manifest=_capture(_restarts(80.0)),
        expect=Expect(
            fires=True,
            impact_min=0.31,
            impact_max=0.32,
            message_contains=("62% of it in the previous epoch's end and the new iterator's creation",),
        ),
    )
)
