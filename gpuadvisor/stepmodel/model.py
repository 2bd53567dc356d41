"""`StepModel`: one model of the analyzed steps, built once per analysis, read by metrics, rules and
renderers. `build_step_model(trace, run)` builds it; `StepModel.predict(...)` answers what a remedy
would gain by replaying a transformed copy of the steps (gpuadvisor.stepmodel.replay)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuadvisor.hardware import classify_tensor_core, gpu_peak_for
from gpuadvisor.heap import give_back
from gpuadvisor.manifest import host_step_durations
from gpuadvisor.stepmodel import build as b
from gpuadvisor.stepmodel.datawait import InProcessDataTime, in_process_data_time
from gpuadvisor.stepmodel.intervals import rows_where
from gpuadvisor.stepmodel.kernels import build_kernel_table
from gpuadvisor.stepmodel.kernels import busy_by_class as kernel_busy_by_class
from gpuadvisor.stepmodel.periodic import run_step_after, run_timing
from gpuadvisor.stepmodel.replay import (
    as_recorded,
    build_program,
    calibrate_host_scale,
    gpu_floor_us,
    replay,
)
from gpuadvisor.stepmodel.tables import per_step_table, sm_use
from gpuadvisor.stepmodel.window import StepWindow, analyzed_window, segmented_steps
from gpuadvisor.trace.flops import matmul_flops
from gpuadvisor.trace.kind import Workload, kind_of

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.runinfo import RunInfo
    from gpuadvisor.stepmodel.periodic import PeriodicCost, RunTiming
    from gpuadvisor.stepmodel.replay import Program, ReplayResult
    from gpuadvisor.trace.model import TraceModel

# A replay whose baseline is further than this from the measured step is flagged in predictions.
FIT_TOLERANCE = 0.30
# Unprofiled / profiled median step outside these bounds: the two cannot both be right (`step_times_agree`).
# The profiler only adds work (a step 25% slower without it is another regime, not noise); its per-op
# cost took up to 2.5x off host-bound steps in our recordings (launch_bound on an H200).
STEP_TIMES_SLOWER = 1.25
STEP_TIMES_FASTER = 0.25


_OPT_SPAN = re.compile(r"^Optimizer\.step#(?P<cls>[^.]+)\.step")

@dataclass(frozen=True)
class Prediction:
    """What the replay predicts for one remedy (or several applied together)."""

    remedy: str  # remedy id, or "+"-joined ids for a combination
    baseline_step_ms: float  # the step time the prediction is relative to
    predicted_step_ms: float  # per step (at the new batch size when the batch changes)
    speedup: float  # per step, or per sample when `batch_multiplier` != 1
    recovered_fraction: float  # 1 - 1/speedup, clamped to [0, 1]: the finding's impact
    batch_multiplier: float = 1.0
    profiler_corrected: bool = False  # the baseline is the step time measured outside the profiler
    replay_fit: float | None = None  # replayed baseline / measured step (1.0 = the replay reproduces it)
    notes: tuple[str, ...] = ()
    # the remedies replayed with their parameters: ((remedy id, {param: value}), ...)
    remedies: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    # "replay": the analyzed steps replayed with the remedy; "timed_steps": a cost between steps
    # removed from the run as timed step by step (gpuadvisor.stepmodel.periodic), per mean step
    basis: str = "replay"
    # the typical (median) step the replay was made on, when the prediction was carried over to the
    # run's mean step (`baseline_step_ms` is then that mean step; issue 38); None: on the replayed step
    median_step_ms: float | None = None
    # the replay's own speed-up on that typical step: what the remedy gives once nothing else (a loader
    # that sets the loop's pace) holds the mean step back (verify --explore reads it after a data lever)
    typical_speedup: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "basis": self.basis,
            "remedy": self.remedy,
            "baseline_step_ms": round(self.baseline_step_ms, 4),
            "predicted_step_ms": round(self.predicted_step_ms, 4),
            "speedup": round(self.speedup, 4),
            "recovered_fraction": round(self.recovered_fraction, 4),
            "profiler_corrected": self.profiler_corrected,
        }
        if self.batch_multiplier != 1.0:
            out["batch_multiplier"] = self.batch_multiplier
            out["per"] = "sample"
        if self.replay_fit is not None:
            out["replay_fit"] = round(self.replay_fit, 4)
        if self.median_step_ms is not None:
            out["per_step"] = "mean"
            out["median_step_ms"] = round(self.median_step_ms, 4)
        if self.typical_speedup is not None:
            out["typical_speedup"] = round(self.typical_speedup, 4)
        if self.notes:
            out["notes"] = list(self.notes)
        if self.remedies:
            out["remedies"] = [{"remedy": r, "params": dict(p)} for r, p in self.remedies]
        return out


Transform = Callable[["StepModel", "Program"], "Program"]


@dataclass
class StepModel:
    """See gpuadvisor/stepmodel/build.py for the tables and docs/model.md for the whole model."""

    trace: TraceModel
    run: RunInfo | None
    window: StepWindow  # the analyzed steps
    segments: StepWindow  # every segmented step (per-step tables of metrics and the report)
    ops: pd.DataFrame
    host: pd.DataFrame
    busy: tuple[Any, Any]
    idle: pd.DataFrame
    data_spans: b.Spans
    optimizer_spans: b.Spans
    read_spans: b.Spans
    facts: b.Facts
    model_spans: b.Spans | None = None  # the model's forward and backward on the host (None: unknown)
    settings: Mapping[str, Any] = field(default_factory=dict)
    unprofiled_step_ms: float | None = None  # host-measured outside the profiler (run directories)
    profiled_step_ms: float | None = None  # host-measured inside the profiler window
    _program: Program | None = field(default=None, repr=False)
    _host_scale: float | None = field(default=None, repr=False)
    _baseline: ReplayResult | None = field(default=None, repr=False)
    _cache: dict[Any, Prediction] = field(default_factory=dict, repr=False)
    _math: dict[str, bool | None] | None = field(default=None, repr=False)
    _scalars: dict[str, float | None] = field(default_factory=dict, repr=False)
    _patterns: tuple[int, int] | None = field(default=None, repr=False)
    _frames: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)
    _derived: dict[Any, Any] = field(default_factory=dict, repr=False)  # busy-time patterns (stepmodel.busy)
    _timing: tuple[RunTiming | None] | None = field(default=None, repr=False)
    _op_flops: Any = field(default=None, repr=False)

    # ---- facts ---------------------------------------------------------------------------------

    @property
    def run_timing(self) -> RunTiming | None:
        """The run as the capture timed it step by step, with its costs between steps (epoch
        restarts, evaluation, checkpoints; gpuadvisor.stepmodel.periodic); None for a raw trace or
        too few timed steps. Computed once."""
        if self._timing is None:
            timing = None
            if self.run is not None and isinstance(self.run.manifest, dict):
                capture = self.run.manifest.get("capture")
                if isinstance(capture, dict):
                    started = self.run.manifest.get("started_unix_s")
                    kw: dict[str, Any] = {
                        "window_data_bound": self._window_data_bound(),
                        "started_unix_s": float(started) if isinstance(started, (int, float)) else None,
                    }
                    timing = run_timing(capture, self.run.environment, **kw)
                    restart = timing.cost("epoch_restart") if timing is not None else None
                    if restart is not None and restart.measured_by == "slow_steps":
                        share = self.epoch_restart_share([s for s in restart.steps if s is not None])
                        if share is not None:
                            timing = run_timing(capture, self.run.environment, restart_removable=share, **kw)
            self._timing = (timing,)
        return self._timing[0]

    def _window_data_bound(self) -> bool:
        """The profiled window's slow steps (over half again the median step) waited for data: the
        DataLoader wait covers at least half of their excess. For runs recorded before the capture timed
        each step's data wait (gpuadvisor.stepmodel.periodic.LoaderStalls)."""
        # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
        import numpy as np

        ps = self.per_step
        if len(ps) == 0 or self.data_spans.count == 0:
            return False
        sel = ps[ps["analyzed"].to_numpy(dtype=bool)]
        dur = sel["step_time_us"].to_numpy(dtype=np.float64)
        if len(dur) < 3:
            return False
        med = float(np.median(dur))
        slow = dur > 1.5 * med
        if not slow.any():
            return False
        wait = sel["dataloader_wait_us"].to_numpy(dtype=np.float64)
        return float(wait[slow].sum()) >= 0.5 * float((dur[slow] - med).sum())

    def epoch_restart_share(self, steps: Iterable[int]) -> float | None:
        """The share of an epoch restart that persistent workers remove, read off the recorded steps
        among `steps` (issue 27): in such a step the host is in DataLoader `__next__` twice, the
        epoch's last call (the workers shut down as it stops the iteration), then, after the new
        iterator's creation (no DataLoader span: the workers start), the new epoch's first batch
        (made from scratch, with persistent workers too). The share is (shut-down + creation) / all
        three, the median over the steps; None when no recorded step shows the pattern."""
        # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
        import numpy as np

        seg, data = self.segments, self.data_spans
        if seg.count == 0 or data.count < 2:
            return None
        shares: list[float] = []
        for sid in steps:
            hit = np.flatnonzero(seg.step_ids == sid)
            if len(hit) == 0:
                continue
            a, b = float(seg.starts[hit[0]]), float(seg.ends[hit[0]])
            inside = (data.starts >= a) & (data.starts < b)
            st, en = data.starts[inside], data.ends[inside]
            if len(st) < 2:
                continue
            gaps = st[1:] - en[:-1]
            i = int(np.argmax(gaps))
            shutdown, creation, first = float(en[i] - st[i]), float(gaps[i]), float(en[i + 1] - st[i + 1])
            total = shutdown + creation + first
            if total > 0 and creation > 0:
                shares.append((shutdown + creation) / total)
        return float(np.median(shares)) if shares else None

    def predict_without(
        self,
        cost: PeriodicCost,
        remedy: str,
        params: Mapping[str, Any] | None = None,
        *,
        kept_per_step_ms: float = 0.0,
    ) -> Prediction:
        """What removing a cost between steps gains, from the timed steps (`basis` "timed_steps"):
        the mean step of the observed run with and without it; `kept_per_step_ms` is the part of it
        the remedy leaves on the loop (a background save's copy to pinned memory)."""
        timing = self.run_timing
        if timing is None:
            raise ValueError("no timed steps in this run")
        base = timing.mean_step_ms
        new = run_step_after(timing, removed=(cost,)) + max(0.0, kept_per_step_ms)
        speedup = base / new if new > 0 else math.inf
        return Prediction(
            remedy=remedy,
            baseline_step_ms=base,
            predicted_step_ms=new,
            speedup=speedup,
            recovered_fraction=max(0.0, min(1.0, 1.0 - new / base)) if base > 0 else 0.0,
            notes=(
                f"priced from the {timing.steps_observed} steps the capture timed (typical step "
                f"{timing.typical_step_ms:.2f} ms, mean step with the costs between steps amortized "
                f"{base:.2f} ms), not from the analyzed window",
            ),
            remedies=((remedy, dict(params or {})),),
            basis="timed_steps",
        )

    @property
    def has_gpu_work(self) -> bool:
        return len(self.ops) > 0

    @property
    def op_flops(self) -> Any:
        """FLOPs of each cpu op of the trace (numpy float64, aligned with `trace.cpu_ops`; 0 where
        unknown): the trace's `flops` arg, else 2*M*K*N of a matmul's input shapes (trace/flops.py)."""
        if self._op_flops is None:
            # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
            import numpy as np

            ops = self.trace.cpu_ops
            self._op_flops = matmul_flops(ops) if len(ops) else np.zeros(0)
        return self._op_flops

    @property
    def per_step(self) -> pd.DataFrame:
        """One row per segmented step: busy time, GPU work by kind, idle by cause, host waits, kernels,
        FLOPs, and whether the step is analyzed (gpuadvisor/stepmodel/tables.py). Read-only, shared."""
        out = self._frames.get("per_step")
        if out is None:
            out = self._frames["per_step"] = per_step_table(self)
        return out

    @property
    def window_ops(self) -> pd.DataFrame:
        """GPU operations launched (or, launch unknown, started) in an analyzed step. Computed once
        and shared by every reader: read-only."""
        out = self._frames.get("window_ops")
        if out is None:
            out = self._frames["window_ops"] = rows_where(self.ops, (self.ops["step"] >= 0).to_numpy(dtype=bool))
        return out

    @property
    def window_kernels(self) -> pd.DataFrame:
        """The kernels of `window_ops` (read-only, shared)."""
        out = self._frames.get("window_kernels")
        if out is None:
            o = self.window_ops
            out = self._frames["window_kernels"] = rows_where(o, (o["kind"] == "kernel").to_numpy(dtype=bool))
        return out

    @property
    def optimizer_class(self) -> str | None:
        """The class of the optimizer whose step the trace shows (`Optimizer.step#Adam.step` -> "Adam")."""
        for name in self.optimizer_spans.names:
            m = _OPT_SPAN.match(name)
            if m:
                return m.group("cls")
        return None

    @property
    def is_training(self) -> bool:
        """The analyzed loop trains (advice about optimizers and learning rates applies), per loop
        (issue 27): inference when the capture saw no optimizer step and no backward pass in the whole
        run (`settings.run_mode.kind` "inference"), or when the analyzed steps show neither while they
        show host ops (gpuadvisor.trace.kind: an evaluation loop of a training script is not the
        training loop); training when the trace shows optimizer steps or a backward pass, or the run
        trained and the trace cannot tell; unknown counts as training."""

        mode = self.settings.get("run_mode") if isinstance(self.settings, Mapping) else None
        if isinstance(mode, Mapping):
            mode = mode.get("kind", mode.get("mode"))
        if mode == "inference":
            return False
        return kind_of(self.trace).workload is not Workload.INFERENCE

    def idle_us(self, cause: str | None = None, sync_kind: str | None = None) -> float:
        """GPU idle time in the window attributed to `cause` (all causes when None)."""
        idle = self.idle
        if len(idle) == 0:
            return 0.0
        sel = idle[idle["step"] >= 0]
        if cause is not None:
            sel = sel[sel["cause"] == cause]
        if sync_kind is not None:
            sel = sel[sel["sync_kind"] == sync_kind]
        return float(sel["dur"].sum())

    def idle_share(self, cause: str | None = None, sync_kind: str | None = None) -> float:
        return self.window.share(self.idle_us(cause, sync_kind))

    def busy_us(self) -> float:
        """GPU busy time inside the analyzed steps."""
        # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
        import numpy as np

        if self.window.count == 0:
            return 0.0
        return float(np.sum(b.covered(self.busy[0], self.busy[1], self.window.starts, self.window.ends)))

    def waits(self, kind: str | None = None) -> pd.DataFrame:
        """Host waits on the device in the window (syncs and blocking launches), optionally of one kind."""
        h = self.host
        if len(h) == 0:
            return h
        sel = h[((h["kind"] == b.SYNC) | h["blocking"].astype(bool)) & (h["step"] >= 0)]
        out: pd.DataFrame = sel[sel["sync_kind"] == kind] if kind is not None else sel
        return out

    def matmul_math(self) -> dict[str, bool | None]:
        """Per distinct matmul/conv/attention kernel name: tensor cores (True), plain FP32 (False),
        unknown (None): the name, else the op's input dtypes with the captured TF32 settings, and the
        achieved FLOP/s against the FP32 peak (gpuadvisor.hardware.classify_tensor_core)."""
        if self._math is None:
            k = self.window_kernels
            peak = gpu_peak_for(self.trace.meta.gpu_name or self._gpu_name(), self.facts.num_sms)
            if len(k) == 0:
                self._math = {}
            else:
                tc = classify_tensor_core(k, dict(self.settings), peak.peak("fp32") if peak else None)
                self._math = dict(zip(tc["name"].tolist(), tc["tensor_core"].tolist(), strict=True))
        return self._math

    @property
    def kernel_table(self) -> pd.DataFrame:
        """Per kernel of `window_kernels` (same index): class, dtype, FLOPs, bytes, achieved TFLOP/s and
        TB/s, roofline time and bound (gpuadvisor.stepmodel.kernels). Computed once; read-only."""
        out = self._frames.get("kernel_table")
        if out is None:
            out = self._frames["kernel_table"] = build_kernel_table(self)
            give_back()
        return out

    @property
    def busy_by_class(self) -> pd.DataFrame:
        """Kernel time per class per analyzed step, its share of the kernel time and its distance to
        the roofline (gpuadvisor.stepmodel.kernels.busy_by_class). Computed once; read-only."""
        out = self._frames.get("busy_by_class")
        if out is None:
            out = self._frames["busy_by_class"] = kernel_busy_by_class(self.kernel_table, self.window.count)
        return out

    def _gpu_name(self) -> str | None:
        return _run_gpu_name(self.run)

    @property
    def gpu_name(self) -> str | None:
        """The GPU's name: the trace's deviceProperties, else environment.json's."""
        return self.trace.meta.gpu_name or self._gpu_name()

    @property
    def sm_count(self) -> int | None:
        """The GPU's streaming multiprocessors, the one definition (`facts.num_sms`): the trace's
        deviceProperties.numSms, else environment.json's sm_count, else the peak table's for the GPU's
        name; None when none says."""
        return self.facts.num_sms

    @property
    def sm_use(self) -> float | None:
        """The share of the SMs the window's non-collective kernels keep busy while they run
        (duration-weighted, `gpuadvisor.stepmodel.tables.sm_use`)."""
        k = self.window_kernels
        return sm_use(k[~k["is_collective"].astype(bool)], self.sm_count) if len(k) else None

    @property
    def kernels_per_step(self) -> float | None:
        """Kernels per analyzed step, the one definition: the median over the analyzed steps of the
        kernels each step launched (`per_step.kernels`, by launch: the host code of a step issues them,
        whenever the GPU runs them). None without steps."""
        ps = self.per_step
        counts = ps["kernels"][ps["analyzed"].to_numpy(dtype=bool)]
        return float(counts.median()) if len(counts) else None

    @property
    def data_handoff_fraction(self) -> float:
        """The share of the DataLoader wait that is the hand-off of a batch already prepared by a
        worker process (the main process receiving it), not waiting for the workers: more workers do
        not shorten it, and a larger batch does not lengthen it much. 0 for a single-process loader
        (the wait is the loading itself) or when the trace has no DataLoader wait; see
        gpuadvisor.stepmodel.build.data_handoff_fraction."""
        if "handoff" not in self._scalars:
            env = self.run.environment if self.run is not None else {}
            self._scalars["handoff"] = b.data_handoff_fraction(self.data_spans, self.window, env)
        value = self._scalars["handoff"]
        return float(value) if value is not None else 0.0

    @property
    def launch_patterns(self) -> tuple[int, int]:
        """(distinct launch patterns, analyzed steps that launched kernels). A step's pattern is the
        multiset of (kernel name, grid size) it launches outside the optimizer and the collectives: the
        same model on the same input shapes launches the same kernels with the same grids every step, so
        more than one pattern means the shapes change between steps (variable sequence lengths,
        multi-scale images, data-dependent sizes). Independent of `record_shapes`."""
        if self._patterns is None:
            # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
            import numpy as np
            import pandas as pd

            o = self.ops
            lts = o["launch_ts"].to_numpy(dtype=np.float64)
            sel = (
                (o["kind"] == "kernel").to_numpy(dtype=bool)
                & ~np.isnan(lts)
                & ~o["in_optimizer"].astype(bool).to_numpy(dtype=bool)
                & ~o["is_collective"].astype(bool).to_numpy(dtype=bool)
            )
            # by the step that launched them (the GPU may run a step's kernels during the next one)
            step = np.asarray(self.window.step_index(lts[sel]), dtype=np.int64)
            mine = step >= 0
            step = step[mine]
            # each (name, grid size) as one integer: a step's pattern is the sorted run of its kernels' codes
            name_code = pd.factorize(o["name"].astype(str).to_numpy(dtype=object)[sel][mine])[0]
            grid_code = pd.factorize(o["blocks"].fillna(-1.0).to_numpy(dtype=np.float64)[sel][mine])[0]
            code = name_code.astype(np.int64) * (int(grid_code.max()) + 1 if len(grid_code) else 1) + grid_code
            order = np.lexsort((code, step))
            runs = np.split(code[order], np.flatnonzero(np.diff(step[order])) + 1) if len(order) else []
            patterns = {r.tobytes() for r in runs}
            self._patterns = (len(patterns), len(runs))
        return self._patterns

    @property
    def shapes_vary(self) -> bool:
        """The kernels launched change from step to step (`launch_patterns`): a CUDA graph recorded for
        one step would not replay the next."""
        patterns, steps = self.launch_patterns
        return steps >= 2 and patterns > 1

    # ---- replay --------------------------------------------------------------------------------

    @property
    def program(self) -> Program:
        if self._program is None:
            self._program = build_program(self)
        return self._program

    @property
    def data_time(self) -> InProcessDataTime | None:
        """The in-process DataLoader's wait per step without and with the profiler, when the replay takes
        the program's DataLoader time as the run shows it outside the profiler (`scale` on it, applied by
        replay.build_program and seen by calibrate_host_scale); None: the data time as recorded (a loader
        with workers waits on a queue the profiler does not slow; a raw trace; too few timed waits; the
        profiled and unprofiled steps outside `step_times_agree`'s bounds, read without the replay that
        this feeds). The one decision: gpuadvisor.stepmodel.datawait."""
        if "data_time" not in self._derived:
            dt = None
            u, p = self.unprofiled_step_ms, self.profiled_step_ms
            if self.run is not None and u and p and STEP_TIMES_FASTER <= u / p <= STEP_TIMES_SLOWER:
                dt = in_process_data_time(
                    self.run.manifest.get("capture") if isinstance(self.run.manifest, dict) else None,
                    self.run.environment,
                    self.data_spans.names,
                )
            self._derived["data_time"] = dt
        out: InProcessDataTime | None = self._derived["data_time"]
        return out

    @property
    def profiler_ratio(self) -> float | None:
        """Unprofiled / profiled step time, host-measured by the capture (None for a raw trace)."""
        u, p = self.unprofiled_step_ms, self.profiled_step_ms
        if u is None or p is None or p <= 0 or u <= 0 or self.step_times_agree is False:
            return None
        return min(1.0, u / p)

    @property
    def host_scale(self) -> float:
        if self._host_scale is None:
            u, p = self.unprofiled_step_ms, self.profiled_step_ms
            if self.step_times_agree is False:
                u = p = None  # the two tell different stories: the trace's host work as recorded
            self._host_scale = calibrate_host_scale(
                self.program,
                u * 1000.0 if u else None,
                p * 1000.0 if p else None,
                self.window.median_step_us,
                floor_us=self.gpu_floor_ms * 1000.0 if self.program.steps else None,
            )
        return self._host_scale

    @property
    def baseline(self) -> ReplayResult:
        if self._baseline is None:
            self._baseline = self._replayed(self.host_scale)
        return self._baseline

    def _replayed(self, host_scale: float) -> ReplayResult:
        """`replay(self.program, host_scale)`, played once per host scale (the baseline and the fit are
        the same replay when the profiler's cost is not taken out)."""
        key = ("replay", float(host_scale))
        hit = self._derived.get(key)
        if hit is None:
            hit = self._derived[key] = replay(self.program, float(host_scale))
        result: ReplayResult = hit
        return result

    @property
    def replay_fit(self) -> float | None:
        """Replayed step (profiler cost kept, an in-process loader's data time as recorded) / measured
        median step: 1.0 when the replay reproduces the trace. (A GPU-bound run whose host ran ahead shows more than 1: the trace's CPU-to-CPU step was
        the host's pace, not the step the run settles at.)"""
        if "fit" not in self._scalars:
            measured = self.window.median_step_us
            if self.host_ran_ahead and self.unprofiled_step_ms:
                measured = max(measured, self.unprofiled_step_ms * 1000.0)  # the GPU's pace, not the host's
            fit = None
            if measured > 0 and self.program.steps:
                recorded = self._replayed(1.0) if self.program.data_scale >= 1.0 else replay(as_recorded(self.program))
                fit = recorded.period_us / measured
            self._scalars["fit"] = fit
        return self._scalars["fit"]

    @property
    def baseline_step_ms(self) -> float:
        """The replayed steady-state step time, without the profiler's own cost when it was measured.

        Not the trace's CPU-to-CPU step: a GPU-bound script that never waits on the device runs its
        host ahead of the GPU for a while, so a short window shows the host's pace, not the step
        time the script settles at (the replay plays the steps until both reach their steady state)."""
        return self.baseline.period_us / 1000.0

    def predict(
        self,
        remedy: str,
        transform: Transform,
        *,
        key: Iterable[Any] = (),
        batch_multiplier: float = 1.0,
        notes: Iterable[str] = (),
        remedies: tuple[tuple[str, Mapping[str, Any]], ...] = (),
        workers: tuple[int, int] | None = None,
        run: bool = True,
    ) -> Prediction:
        """Replay the program transformed by `transform`; cached per (remedy, key). With `run` the
        prediction is then carried over to the run's mean step (`on_run`; `workers`: DataLoader workers
        (now, new))."""
        cache_key = (remedy, tuple(key), batch_multiplier, workers, run)
        hit = self._cache.get(cache_key)
        if hit is not None:
            return hit
        base = self.baseline.period_us
        new_program = transform(self, self.program.copy())
        new = replay(new_program, self.host_scale).period_us
        if new_program.min_period_us > new:
            new = new_program.min_period_us
        ratio = new / base if base > 0 else 1.0
        per_sample = ratio / batch_multiplier
        speedup = 1.0 / per_sample if per_sample > 0 else math.inf
        fit = self.replay_fit
        all_notes = list(notes) + list(new_program.notes)
        if fit is not None and abs(fit - 1.0) > FIT_TOLERANCE:
            all_notes.append(
                f"the replayed baseline is {fit:.2f}x the measured step: the prediction is less certain"
            )
        pred = Prediction(
            remedy=remedy,
            baseline_step_ms=base / 1000.0,
            predicted_step_ms=new / 1000.0,
            speedup=speedup,
            recovered_fraction=max(0.0, min(1.0, 1.0 - per_sample)),
            batch_multiplier=batch_multiplier,
            profiler_corrected=self.profiler_ratio is not None,
            replay_fit=fit,
            notes=tuple(all_notes),
            remedies=remedies,
        )
        if run:
            pred = self.on_run(pred, workers=workers)
        self._cache[cache_key] = pred
        return pred

    @property
    def step_times_agree(self) -> bool | None:
        """The steps timed without the profiler and those inside the window tell one story: the unprofiled
        median is not above the profiled one by more than `STEP_TIMES_SLOWER` (the profiler only adds
        work) nor below it by more than `STEP_TIMES_FASTER` (what the profiler's per-op cost can take off
        a host-bound step). None when one of them is not known (a raw trace). When they disagree (a
        machine loaded differently before and after the window, a phase change), nothing is rescaled to
        the unprofiled steps and the analysis says so (issue 38)."""
        u, p = self.unprofiled_step_ms, self.profiled_step_ms
        if u is None or p is None or u <= 0 or p <= 0:
            return None
        return STEP_TIMES_FASTER <= u / p <= STEP_TIMES_SLOWER or self.host_ran_ahead

    @property
    def gpu_floor_ms(self) -> float:
        """The replayed step with almost free host work: the GPU's own pace (ms; computed once, for the
        host-scale calibration and `host_ran_ahead`)."""
        if "floor" not in self._scalars:
            self._scalars["floor"] = gpu_floor_us(self.program) / 1000.0
        return float(self._scalars["floor"] or 0.0)

    @property
    def host_ran_ahead(self) -> bool:
        """The window's host-timed steps were the host's pace while the launch queue filled, not the
        run's: the step without the profiler is longer than the profiled one by more than
        `STEP_TIMES_SLOWER` (which the profiler alone cannot make) and the GPU's own work, replayed with
        almost free host work, explains it (within that factor either way). A GPU-bound loop that never
        waits for the device runs ahead by as many steps as the launch queue holds: an H200 run with 75
        kernels a step timed 3.9 ms steps in its window, then 11.1 ms once the queue was full, the
        replayed GPU floor 11.0 ms (mse_wide_head-planted)."""
        if "ahead" not in self._scalars:
            u, p = self.unprofiled_step_ms, self.profiled_step_ms
            ahead = False
            if u is not None and p is not None and u > p * STEP_TIMES_SLOWER > 0 and self.program.steps:
                ahead = 1.0 / STEP_TIMES_SLOWER <= self.gpu_floor_ms / u <= STEP_TIMES_SLOWER
            self._scalars["ahead"] = ahead
        return bool(self._scalars["ahead"])

    def on_run(
        self,
        pred: Prediction,
        *,
        workers: tuple[int, int] | None = None,
        removed: Iterable[PeriodicCost] = (),
    ) -> Prediction:
        """`pred` (made on the typical step the replay plays) as a share of the run's mean step, the step
        the user pays (issue 38; gpuadvisor.stepmodel.periodic.run_step_after): the typical step scales by
        the replay's ratio, stalls and costs between steps stay unless the remedy removes them, and a
        loader that stalls the loop sets its pace. Unchanged for a raw trace, a run whose steps were not
        timed, or one whose profiled and unprofiled steps disagree."""
        timing = self.run_timing
        if timing is None or self.step_times_agree is False or timing.mean_step_ms <= 0:
            return pred
        m = pred.batch_multiplier
        ratio = pred.predicted_step_ms / pred.baseline_step_ms if pred.baseline_step_ms > 0 else 1.0
        base = timing.mean_step_ms
        new = run_step_after(timing, ratio=ratio, batch_multiplier=m, workers=workers, removed=tuple(removed))
        per_sample = new / (base * m)
        extra: list[str] = []
        if base > timing.typical_step_ms * 1.02:
            parts = []
            if timing.stalls is not None:
                parts.append(f"{timing.stalls.per_step_ms:.2f} ms of stalls")
            periodic = base - timing.typical_step_ms - (timing.stalls.per_step_ms if timing.stalls else 0.0)
            if periodic > 0.005:
                parts.append(f"{periodic:.2f} ms of costs between steps")
            extra.append(
                f"on the run's mean step {base:.2f} ms (the median step {timing.typical_step_ms:.2f} ms + "
                + " + ".join(parts)
                + ")"
            )
        return dataclasses.replace(
            pred,
            baseline_step_ms=base,
            predicted_step_ms=new,
            speedup=1.0 / per_sample if per_sample > 0 else math.inf,
            recovered_fraction=max(0.0, min(1.0, 1.0 - per_sample)),
            median_step_ms=timing.typical_step_ms,
            typical_speedup=pred.speedup,
            notes=pred.notes + tuple(extra),
        )


def _profiler_times(run: RunInfo | None) -> tuple[float | None, float | None]:
    """(unprofiled, profiled) median host-measured step times in ms from the run's manifest."""
    if run is None or not isinstance(run.manifest, dict):
        return None, None
    capture = run.manifest.get("capture")
    if not isinstance(capture, dict):
        return None, None
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    unprofiled, profiled = host_step_durations(capture)
    if len(unprofiled) < 2 or len(profiled) < 2:
        return None, None
    return float(np.median(unprofiled)), float(np.median(profiled))


def _run_gpu_name(run: RunInfo | None) -> str | None:
    if run is not None:
        g = run.gpu(0)
        if g and g.get("name"):
            return str(g.get("name"))
    return None


def _table_sm_count(gpu_name: str | None) -> int | None:
    """The peak table's SM count for a GPU the trace and the run say nothing of."""
    peak = gpu_peak_for(gpu_name)
    return peak.sm_count if peak is not None else None


def build_step_model(
    trace: TraceModel, run: RunInfo | None = None, *, reference_step_ms: float | None = None
) -> StepModel:
    """Build the step model of `trace` (and the run's captured information, when given).

    `reference_step_ms`: the step time measured outside the profiler by the user; it replaces the
    capture's reference steps (the window's own host-timed steps, or the trace's, stay the profiled side)."""
    window = analyzed_window(trace)
    segments = segmented_steps(trace)
    data = b.dataloader_spans(trace)
    optimizer = b.optimizer_spans(trace)
    reads = b.scalar_read_spans(trace)
    compute = b.model_spans(trace, segments)
    optimizer = b.optimizer_own_spans(optimizer, compute)
    ops = b.build_ops(trace, segments, window, optimizer)
    give_back()  # each builder drops whole-column temporaries: the next one starts on a returned heap
    host = b.build_host(trace, segments, window, ops, data, optimizer, reads)
    give_back()
    busy = b.busy_intervals(ops)
    idle = b.attribute_idle(segments, window, ops, host, busy, data)
    give_back()
    facts = b.estimate_facts(trace, ops, host, run)
    if facts.num_sms is None:
        facts = dataclasses.replace(facts, num_sms=_table_sm_count(trace.meta.gpu_name or _run_gpu_name(run)))
    unprofiled, profiled = _profiler_times(run)
    if reference_step_ms is not None:
        unprofiled = float(reference_step_ms)
        if profiled is None and window.count:
            profiled = window.median_step_us / 1000.0
    return StepModel(
        trace=trace,
        run=run,
        window=window,
        segments=segments,
        ops=ops,
        host=host,
        busy=busy,
        idle=idle,
        data_spans=data,
        optimizer_spans=optimizer,
        read_spans=reads,
        facts=facts,
        model_spans=compute if compute.count else None,
        settings=dict(run.settings) if run is not None else {},
        unprofiled_step_ms=unprofiled,
        profiled_step_ms=profiled,
    )
