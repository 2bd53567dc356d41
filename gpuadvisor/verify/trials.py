"""Running verify's trial processes and turning their results into verify.json's entries: the
options, the recorded command, one trial child per configuration (its own session, killed with its
process group past its time limit), the baseline and trial entries, the document's head and where it
was measured. Shared by `gpuadvisor verify` (runner.py) and its explore search (explore_run.py).

Does not import torch (the trial children do).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpuadvisor import __version__
from gpuadvisor.capture._io import own_module_argv, write_json_atomic
from gpuadvisor.errors import InputError, OutputLostError, UsageError
from gpuadvisor.redact import sealed_argv
from gpuadvisor.remedies import REMEDIES, RemedyId
from gpuadvisor.terminal import strip_controls
from gpuadvisor.verify.measure import across_trials
from gpuadvisor.verify.plan import (
    ALLOC_CONF,
    EXPANDABLE,
    PlannedTrial,
)
from gpuadvisor.verify.results import VERIFY_SCHEMA_VERSION
from gpuadvisor.verify.scratch import Workplace, prepare
from gpuadvisor.verify.stats import BatchSamples, batch_samples, compare, measured
from gpuadvisor.verify.trial import TrialConfig
from gpuadvisor.words import plural

BASELINE = "baseline"
TRIAL_TIMEOUT_S = 600.0  # one trial process, whatever the budget
EXIT_GRACE_S = 30.0  # after the result is written, the script's shutdown (workers, atexit) may take this
LOG_TAIL_LINES = 15


@dataclass(frozen=True)
class VerifyOptions:
    trials: int = 3
    budget_s: float | None = None
    only: tuple[str, ...] = ()
    warmup_steps: int = 10
    steps: int = 20
    num_workers: int | None = None  # None: default_num_workers()
    quiet: bool = False
    explore: bool = False  # every applicable lever, then the best combination (explore.py)
    allow_other_machine: bool = False  # measure although the recording was made elsewhere
    output: Path | None = None  # verify.json's path (default RUN/verify.json)
    python: str | None = None  # the trials' interpreter (--python); default: the one running verify
    allow_writes: bool = False  # run the trials in the working directory itself (no scratch copy)

    def validate(self) -> None:
        if self.trials < 1:
            raise UsageError(f"--trials must be >= 1 (got {self.trials})")
        if self.warmup_steps < 1:
            raise UsageError(f"--warmup-steps must be >= 1 (got {self.warmup_steps})")
        if self.steps < 1:
            raise UsageError(f"--steps must be >= 1 (got {self.steps})")
        if self.budget_s is not None and self.budget_s <= 0:
            raise UsageError(f"--budget must be > 0 seconds (got {self.budget_s})")
        if self.num_workers is not None and self.num_workers < 1:
            raise UsageError(f"--num-workers must be >= 1 (got {self.num_workers})")


@dataclass(frozen=True)
class VerifyOutcome:
    path: Path
    document: dict[str, Any]
    exit_code: int  # 0: verify.json written; 1: the baseline itself failed


@dataclass
class RunConfig:
    """A configuration of the trial child: the baseline, or one planned remedy."""

    name: str
    applies: tuple[str, ...]
    planned: PlannedTrial | None
    results: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # remedy -> lever parameters
    extra_args: tuple[str, ...] = ()  # script flags appended to the recorded arguments (explore)
    batch_multiplier: int | None = None
    left_out: dict[str, str] = field(default_factory=dict)  # all_safe members that failed alone, why
    final: str | None = None  # "failed"/"skipped" once decided: no more trials of it
    reason: str | None = None


# ---------------------------------------------------------------------------------------------- reading


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise InputError(f"cannot read {path}: {err}") from None


@dataclass(frozen=True)
class RecordedCommand:
    """What the run recorded about how the script was started (manifest.json)."""

    kind: str
    target: str
    args: tuple[str, ...]
    cwd: Path
    python: str

    def script_path(self) -> Path:
        p = Path(self.target)
        return p if p.is_absolute() else self.cwd / p


def say_to(stream: IO[str], quiet: bool, msg: str) -> None:
    if quiet:
        return
    # it quotes the run directory, the script's exception texts and paths: data for a terminal or a CI log
    stream.write(f"verify: {strip_controls(msg)}\n")
    stream.flush()


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if not ln.startswith("USDT:")][-lines:]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def workplace(cmd: RecordedCommand, run: Path, options: VerifyOptions, out: IO[str]) -> Workplace:
    """Where the trials run (gpuadvisor/verify/scratch.py), said before the first trial; UsageError
    when the working directory cannot be copied and --allow-writes is off."""
    place = prepare(cmd.cwd, allow_writes=options.allow_writes, skip=[run])
    say_to(out, options.quiet, place.text)
    return place



class TrialRunner:
    def __init__(
        self, cmd: RecordedCommand, options: VerifyOptions, workdir: Path, num_workers: int, place: Workplace
    ) -> None:
        self.cmd = cmd
        self.place = place  # where the trials run (a scratch copy of the working directory)
        self.options = options
        self.workdir = workdir
        self.num_workers = num_workers
        self.index = 0

    def run(self, config: RunConfig, timeout_s: float = TRIAL_TIMEOUT_S) -> dict[str, Any]:
        self.index += 1
        tag = f"{self.index:03d}-{config.name}"
        result_path = self.workdir / f"{tag}.result.json"
        log_path = self.workdir / f"{tag}.log"
        planned = config.planned
        env, alloc_before = trial_environment(config.applies, os.environ)
        # the real arguments (profile --verify has them, credentials too) never reach the config file
        file_args, argv_env = sealed_argv([*self.cmd.args, *config.extra_args])
        env.update(argv_env)
        multiplier = config.batch_multiplier or (planned.batch_multiplier if planned else None) or 1
        trial_cfg = TrialConfig(
            target={
                "kind": self.cmd.kind,
                "path_or_name": self.place.translate(self.cmd.cwd, self.cmd.target)
                if self.cmd.kind == "script"
                else self.cmd.target,
                "argv": file_args,
            },
            result=str(result_path),
            remedies=config.applies,
            params=config.params,
            warmup_steps=self.options.warmup_steps,
            steps=self.options.steps,
            num_workers=self.num_workers,
            batch_multiplier=multiplier,
            alloc_conf_before=alloc_before,
            guard=self.place.guard(),
        )
        cfg_path = self.workdir / f"{tag}.config.json"
        cfg_path.write_text(json.dumps(trial_cfg.to_json()), encoding="utf-8")
        # `python -m gpuadvisor.verify.trial CONFIG`, never replaced by a gpuadvisor.py of the script's folder
        argv = [self.cmd.python, *own_module_argv("gpuadvisor.verify.trial", str(cfg_path))]
        started = time.monotonic()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                argv,
                cwd=self.place.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                returncode = self._wait(proc, result_path, timeout_s)
            except BaseException:
                _kill_group(proc)
                proc.wait()
                raise
            finally:
                _kill_group(proc)  # DataLoader workers or other processes the script left behind
        wall = time.monotonic() - started
        result = read_json(result_path) if result_path.is_file() else None
        if not isinstance(result, dict):
            what = "timed out" if returncode is None else f"ended with status {returncode}"
            result = {
                "status": "failed",
                "reason": f"the trial process {what} before it reported a result",
            }
        result["wall_s"] = round(wall, 3)
        if result.get("status") != "ok":
            result["log_tail"] = _tail(log_path)
        return result

    @staticmethod
    def _wait(proc: subprocess.Popen[bytes], result_path: Path, timeout_s: float) -> int | None:
        deadline = time.monotonic() + timeout_s
        reported_at: float | None = None
        while True:
            try:
                return proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if reported_at is None and result_path.is_file():
                reported_at = now
            if now > deadline or (reported_at is not None and now - reported_at > EXIT_GRACE_S):
                _kill_group(proc)
                proc.wait()
                return None if reported_at is None else 0


def trial_environment(applies: Sequence[str], base: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """The trial child's environment: the parent's own, plus the allocator setting of
    expandable_segments (appended to an existing PYTORCH_CUDA_ALLOC_CONF). Also returns the value
    the setting had before, for the change record."""
    env = dict(base)
    before = env.get(ALLOC_CONF)
    if RemedyId.EXPANDABLE_SEGMENTS.value in applies:
        env[ALLOC_CONF] = f"{before},{EXPANDABLE}" if before else EXPANDABLE
    return env, before


def median_of(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def rounded(value: float | None, nd: int = 3) -> float | None:
    return None if value is None else round(value, nd)


def trial_entry(config: RunConfig, baseline: RunConfig) -> dict[str, Any]:
    planned = config.planned
    assert planned is not None
    spec = REMEDIES[planned.remedy]
    oks = [r for r in config.results if r.get("status") == "ok"]
    changes: list[dict[str, Any]] = []
    notes: list[str] = []
    for r in config.results:
        for c in r.get("changes") or []:
            if c not in changes:
                changes.append(c)
        for n in r.get("notes") or []:
            if n not in notes:
                notes.append(n)
    entry: dict[str, Any] = {
        "remedy": planned.remedy.value,
        "title": spec.title,
        "applies": list(config.applies),
        "finding": planned.findings[0] if planned.findings else None,
        "findings": list(planned.findings),
        "category": planned.category,
        "forced": planned.forced,
        "change": "; ".join(c["text"] for c in changes) if changes else None,
        "changes": changes,
        "changes_numerics": planned.changes_numerics,
        "changes_batch": planned.changes_batch,
        "predicted_speedup": rounded(planned.predicted_speedup),
        "trials": len(oks),
    }
    if notes:
        entry["notes"] = notes
    if config.left_out:
        entry["left_out"] = [{"remedy": r, "reason": why} for r, why in config.left_out.items()]
    if config.final is not None:
        entry["status"] = config.final
        entry["reason"] = config.reason
        failed = [r for r in config.results if r.get("status") != "ok"]
        if failed and failed[-1].get("log_tail"):
            entry["log_tail"] = failed[-1]["log_tail"]
        return entry
    base_ok = [r for r in baseline.results if r.get("status") == "ok"]
    if not oks:
        entry.update(status="skipped", reason=config.reason or "no trial ran (budget)")
        return entry
    methods = {r.get("step_detection") for r in (*oks, *base_ok)}
    if len(methods) > 1:
        entry.update(
            status="failed",
            reason=f"steps were counted differently across trials: {sorted(map(str, methods))}",
        )
        return entry
    by_samples = planned.changes_batch
    key = "samples_per_s" if by_samples else "step_time_ms"
    samples = batch_samples(base_ok, oks) if by_samples else None
    if samples is not None and samples.unchanged is not None:
        entry.update(status="failed", reason=samples.note)
        return entry
    base_values, trial_values = (
        (samples.baseline, samples.remedy)
        if samples is not None
        else (measured(base_ok, key), measured(oks, key))
    )
    if not base_values or len(trial_values) != len(oks):
        entry.update(
            status="failed",
            reason=f"{key} was not measured (no batches counted at a DataLoader or the model's input)",
        )
        return entry
    cmp = compare(base_values, trial_values, higher_is_better=by_samples)
    entry.update(
        status="ok",
        compared_in=key,
        speedup=rounded(cmp.speedup),
        low=rounded(cmp.low),
        high=rounded(cmp.high),
        verdict=cmp.verdict.value,
        chance_of_separation=rounded(cmp.chance, 4),
        step_time_ms=rounded(median_of(measured(oks, "step_time_ms"))),
        samples_per_s=rounded(median_of(measured(oks, "samples_per_s"))),
        step_times_ms=[rounded(v) for v in measured(oks, "step_time_ms")],
        samples_per_s_trials=[rounded(v) for v in measured(oks, "samples_per_s")],
        **across_trials(oks),
    )
    entry.update(peak_memory(oks))
    if samples is not None:
        entry["samples_shape"] = counted_shape(oks)
        if samples.sizes is not None:
            entry["batch_sizes"] = list(samples.sizes)  # the batch axis's size: baseline, lever
        if samples.axis:
            # the comparison counted along the batch's axis; the trials' own samples/s count axis 0
            entry["samples_axis"] = samples.axis
    if by_samples and planned.batch_multiplier:
        entry["note"] = batch_note(planned.batch_multiplier, samples)
    elif planned.changes_numerics:
        entry["note"] = "lower-precision math: re-check accuracy (loss curve) before keeping it"
    return entry


def batch_note(multiplier: int, samples: BatchSamples | None) -> str:
    """The note of a lever that raises the batch `multiplier` times: how it is compared and the
    learning-rate caveat. Where the counted input's shape says the batch grew by another factor (a
    --batch-size multiplied from a count that was not the batch), the shape's factor is told."""
    m = f"{multiplier}"
    if samples is not None and samples.sizes and samples.factor and samples.other_factor(multiplier):
        m = f"{samples.factor:.3g}"
        text = (
            f"the batch is {m}x larger ({samples.sizes[0]} -> {samples.sizes[1]}, as the input's shape says)"
        )
    else:
        text = f"the batch is {m}x larger"
    text += (
        f": compared in samples/s; the learning rate needs scaling (linear rule: x{m}, with warm-up) and "
        "accuracy re-checking"
    )
    if samples is not None and samples.note:
        text += f"; {samples.note}"
    return text


def counted_shape(results: Sequence[Mapping[str, Any]]) -> list[int] | None:
    """The shape of the tensor counted as the batch, where every trial recorded the same one."""
    shapes = {tuple(r["samples_shape"]) for r in results if r.get("samples_shape")}
    return list(shapes.pop()) if len(shapes) == 1 else None


def peak_memory(results: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The highest peak allocated GPU memory of the trials and the device's total, where recorded."""
    peaks = [int(r["peak_memory_bytes"]) for r in results if isinstance(r.get("peak_memory_bytes"), int)]
    totals = [int(r["memory_total_bytes"]) for r in results if isinstance(r.get("memory_total_bytes"), int)]
    out: dict[str, int] = {}
    if peaks:
        out["peak_memory_bytes"] = max(peaks)
    if totals:
        out["memory_total_bytes"] = max(totals)
    return out


def baseline_entry(baseline: RunConfig) -> dict[str, Any]:
    base_ok = [r for r in baseline.results if r.get("status") == "ok"]
    entry: dict[str, Any] = {
        "status": baseline.final or ("ok" if base_ok else "not_run"),
        "step_time_ms": rounded(median_of(measured(base_ok, "step_time_ms"))),
        "samples_per_s": rounded(median_of(measured(base_ok, "samples_per_s"))),
        "trials": len(base_ok),
        "step_times_ms": [rounded(v) for v in measured(base_ok, "step_time_ms")],
        "samples_per_s_trials": [rounded(v) for v in measured(base_ok, "samples_per_s")],
        "step_detection": base_ok[0].get("step_detection") if base_ok else None,
        "samples_shape": counted_shape(base_ok),
        **across_trials(base_ok),
        **peak_memory(base_ok),
    }
    if baseline.final is not None:
        entry["reason"] = baseline.reason
        if baseline.results and baseline.results[-1].get("log_tail"):
            entry["log_tail"] = baseline.results[-1]["log_tail"]
    return entry


def document_head(
    run: Path, cmd: RecordedCommand, options: VerifyOptions, num_workers: int, started_wall: float
) -> dict[str, Any]:
    return {
        "schema_version": VERIFY_SCHEMA_VERSION,
        "tool": {"name": "gpuadvisor", "version": __version__},
        "run": str(run),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started_wall)),
        "command": {
            "python": cmd.python,
            "kind": cmd.kind,
            "target": cmd.target,
            "args": list(cmd.args),
            "cwd": str(cmd.cwd),
        },
        "settings": {
            "trials": options.trials,
            "warmup_steps": options.warmup_steps,
            "steps": options.steps,
            "budget_s": options.budget_s,
            "only": list(options.only),
            "num_workers": num_workers,
        },
    }


def summary_text(t: Mapping[str, Any]) -> str:
    if t.get("status") != "ok":
        return f"{t.get('status')} ({t.get('reason')})"
    unit = "samples/s" if t.get("compared_in") == "samples_per_s" else "step time"
    where = f", measured on {t['measured_on']}" if t.get("measured_on") else ""
    return (
        f"{t['speedup']:.2f}x in {unit} ({t['low']:.2f}-{t['high']:.2f}, {plural(t['trials'], 'trial')}, "
        f"{t['verdict']}{where})"
    )


def where_text(machine: Mapping[str, Any]) -> str:
    return (
        f"measured on {machine.get('measured_text')}, recorded on {machine.get('recorded_text')} "
        f"({'; '.join(machine.get('differences') or [])})"
    )


def stamp_machine(document: dict[str, Any], machine: Mapping[str, Any]) -> None:
    """verify.json's `machine` (its `notes` join the document's); on another machine every measured
    entry says where it was measured."""
    document["machine"] = dict(machine)
    document["notes"] = [*document.get("notes", []), *machine.get("notes", [])]
    if machine.get("same"):
        return
    where = str(machine.get("measured_text"))
    document["measured_on"] = where
    for entry in (document.get("baseline"), *(document.get("trials") or [])):
        if isinstance(entry, dict):
            entry["measured_on"] = where
    explore = document.get("explore")
    if isinstance(explore, dict) and isinstance(explore.get("best"), dict):
        explore["best"]["measured_on"] = where
    document["notes"] = [
        *document.get("notes", []),
        f"not measured on the recording's machine: {where_text(machine)}",
    ]


def write_document(path: Path, document: Mapping[str, Any]) -> None:
    try:
        write_json_atomic(path, dict(document))
    except OSError as err:
        raise OutputLostError(f"cannot write {path}: {err.strerror or err}") from None
