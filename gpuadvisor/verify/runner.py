"""`gpuadvisor verify RUN`: plan the trials, run them interleaved with baseline trials, write verify.json.
With --explore (`explore_run`): the search of `gpuadvisor.verify.explore` run with the same trials.

Does not import torch (the trial children do). The run directory is read, never written, except for
RUN/verify.json (atomically). Trial children run in their own session with their output in a
temporary folder; a child still alive after its time limit is killed with its process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpuadvisor import __version__, rundir
from gpuadvisor.capture._io import own_module_argv, write_json_atomic
from gpuadvisor.errors import InputError, OutputLostError, UsageError
from gpuadvisor.outputs import check_output
from gpuadvisor.received import read_json_file
from gpuadvisor.redact import sealed_argv
from gpuadvisor.remedies import REMEDIES, RemedyId, explore_levers
from gpuadvisor.runinfo import read_environment, read_manifest
from gpuadvisor.terminal import strip_controls
from gpuadvisor.verify import explore as ex
from gpuadvisor.verify.command import RecordedCommand, recorded_command, recorded_python_note
from gpuadvisor.verify.explore import estimate_text
from gpuadvisor.verify.plan import (
    ALLOC_CONF,
    EXPANDABLE,
    PlannedTrial,
    batch_multiplier,
    default_num_workers,
    finding_remedies,
    plan_trials,
    predicted_speedup,
)
from gpuadvisor.verify.probe import compare as compare_machines
from gpuadvisor.verify.probe import describe, probe, recorded_machine
from gpuadvisor.verify.results import VERIFY_FILE, VERIFY_SCHEMA_VERSION, noise_band_text
from gpuadvisor.verify.scratch import Workplace, prepare
from gpuadvisor.verify.stats import BatchSamples, batch_samples, compare, measured, other_factor
from gpuadvisor.verify.trial import TrialConfig
from gpuadvisor.words import plural

__all__ = ["VerifyOptions", "VerifyOutcome", "verify_run"]

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
class _Config:
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


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise InputError(f"cannot read {path}: {err}") from None


Analyzer = Callable[[Path], Sequence[Mapping[str, Any]]]


def _findings_of(run_dir: Path, analyze: Analyzer | None) -> list[dict[str, Any]]:
    """RUN/findings.json's findings, else a fresh analysis of the run by the caller's `analyze` (verify
    runs below the analysis and does not import it)."""
    doc = read_json_file(run_dir, rundir.FINDINGS)  # inside the run directory only, bounded
    if isinstance(doc, dict) and isinstance(doc.get("findings"), list):
        return [f for f in doc["findings"] if isinstance(f, dict)]
    if analyze is None:
        raise UsageError(
            f"{run_dir} has no {rundir.FINDINGS}: analyze it first (gpuadvisor report {run_dir})"
        )
    return [dict(f) for f in analyze(run_dir)]


# ---------------------------------------------------------------------------------------------- trials


def _say(stream: IO[str], quiet: bool, msg: str) -> None:
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


class _TrialRunner:
    def __init__(
        self, cmd: RecordedCommand, options: VerifyOptions, workdir: Path, num_workers: int, place: Workplace
    ) -> None:
        self.cmd = cmd
        self.place = place
        self.options = options
        self.workdir = workdir
        self.num_workers = num_workers
        self.index = 0

    def run(self, config: _Config, timeout_s: float = TRIAL_TIMEOUT_S) -> dict[str, Any]:
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
        result = _read_json(result_path) if result_path.is_file() else None
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


def _progress_text(result: Mapping[str, Any]) -> str:
    status = result.get("status")
    if status == "ok":
        parts = [f"{result.get('step_time_ms', 0):.1f} ms/step"]
        if result.get("samples_per_s"):
            parts.append(f"{result['samples_per_s']:.0f} samples/s")
        return ", ".join(parts)
    return f"{status}: {result.get('reason')}"


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _r(value: float | None, nd: int = 3) -> float | None:
    return None if value is None else round(value, nd)


def _trial_entry(config: _Config, baseline: _Config) -> dict[str, Any]:
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
        "predicted_speedup": _r(planned.predicted_speedup),
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
        (samples.baseline, samples.remedy) if samples is not None else (measured(base_ok, key), measured(oks, key))
    )
    if not base_values or len(trial_values) != len(oks):
        entry.update(status="failed", reason=f"{key} was not measured (no batches counted at a DataLoader or the model's input)")
        return entry
    cmp = compare(base_values, trial_values, higher_is_better=by_samples)
    entry.update(
        status="ok",
        compared_in=key,
        speedup=_r(cmp.speedup),
        low=_r(cmp.low),
        high=_r(cmp.high),
        verdict=cmp.verdict.value,
        chance_of_separation=_r(cmp.chance, 4),
        step_time_ms=_r(_median(measured(oks, "step_time_ms"))),
        samples_per_s=_r(_median(measured(oks, "samples_per_s"))),
        step_times_ms=[_r(v) for v in measured(oks, "step_time_ms")],
        samples_per_s_trials=[_r(v) for v in measured(oks, "samples_per_s")],
    )
    entry.update(peak_memory(oks))
    if samples is not None:
        entry["samples_shape"] = _shape(oks)
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
        text = f"the batch is {m}x larger ({samples.sizes[0]} -> {samples.sizes[1]}, as the input's shape says)"
    else:
        text = f"the batch is {m}x larger"
    text += (
        f": compared in samples/s; the learning rate needs scaling (linear rule: x{m}, with warm-up) and "
        "accuracy re-checking"
    )
    if samples is not None and samples.note:
        text += f"; {samples.note}"
    return text


def _script_value(results: Sequence[Mapping[str, Any]], flag: str) -> int | None:
    """The value the script's argument parser gave `flag` in the baseline trials (a positive int)."""
    for r in results:
        values = r.get("script_option_values")
        value = values.get(flag) if isinstance(values, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _baseline_batch(results: Sequence[Mapping[str, Any]], axis: int = 0) -> int | None:
    """Samples per step of the baseline trials (their median), as counted at the model's input or the
    DataLoader; None when no trial counted them. With `axis` (where a batch lever showed the batch is
    not axis 0 of the counted input: a sequence-first LSTM), the size of that axis instead."""
    if axis:
        per_step = sorted(
            float(shape[axis])
            for r in results
            if isinstance(shape := r.get("samples_shape"), (list, tuple)) and len(shape) > axis
        )
    else:
        per_step = sorted(
            float(r["samples"]) / float(r["steps_timed"])
            for r in results
            if isinstance(r.get("samples"), (int, float)) and r.get("samples") and r.get("steps_timed")
        )
    if not per_step:
        return None
    return max(1, round(per_step[len(per_step) // 2]))


def _predicted_by_lever(
    levers: Sequence[ex.ExploreLever], findings: Sequence[Mapping[str, Any]]
) -> dict[str, float]:
    """Lever name -> the largest speed-up a finding of the run predicts for the lever's remedy (levers
    no finding names are left out)."""
    out: dict[str, float] = {}
    for lv in levers:
        preds = [
            p
            for p in (predicted_speedup(f) for f in findings if lv.remedy in finding_remedies(f))
            if p is not None
        ]
        if preds:
            out[lv.name] = max(preds)
    return out


def verify_run(
    run_dir: str | os.PathLike[str],
    options: VerifyOptions | None = None,
    *,
    stream: IO[str] | None = None,
    argv: Sequence[str] | None = None,
    analyze: Analyzer | None = None,
) -> VerifyOutcome:
    """Measure the injectable remedies of a run's findings; write and return RUN/verify.json. `argv`:
    the script's real sys.argv (see recorded_command). `analyze`: the findings (as JSON objects) of a
    run that has no findings.json yet (`gpuadvisor.analysis.finding_dicts`)."""
    options = options or VerifyOptions()
    options.validate()
    out = stream if stream is not None else sys.stderr
    run = Path(run_dir)
    if not rundir.is_run_dir(run):
        raise UsageError(
            f"{run} is not a run directory (no manifest.json): verify needs `gpuadvisor profile`'s run"
        )
    read_notes: list[str] = []
    manifest = read_manifest(run, read_notes)  # every value checked once (gpuadvisor/runcheck.py)
    environment = read_environment(run, read_notes)
    if not manifest:
        raise InputError(f"{run / rundir.MANIFEST} is not a readable JSON object: {'; '.join(read_notes)}")
    cmd = recorded_command(manifest, argv, options.python)
    path = output_path(run, options.output)
    machine = check_machine(manifest, environment, cmd, allow_other=options.allow_other_machine)
    if machine["differences"]:
        _say(out, options.quiet, f"measuring on another machine than the recording's: {where_text(machine)}")
    python_note = recorded_python_note(manifest, cmd) if argv is None else None
    if python_note:
        _say(out, options.quiet, python_note)
    machine["notes"] = [*read_notes, *([python_note] if python_note else [])]  # into verify.json's notes
    num_workers = options.num_workers or default_num_workers()
    if options.explore:
        return explore_run(
            run,
            path,
            cmd,
            manifest,
            environment,
            options,
            out,
            num_workers,
            machine,
            _findings_of(run, analyze),
        )
    planned = plan_trials(_findings_of(run, analyze), environment, only=options.only, num_workers=num_workers)

    started_wall = time.time()
    started = time.monotonic()
    baseline = _Config(BASELINE, (), None)
    configs = [baseline]
    skipped_upfront: list[_Config] = []
    for p in planned:
        c = _Config(p.remedy.value, tuple(r.value for r in p.applies), p)
        if p.skip_reason is not None:
            c.final, c.reason = "skipped", p.skip_reason
            skipped_upfront.append(c)
        else:
            configs.append(c)
    names = ", ".join(c.name for c in configs[1:]) or "none"
    _say(
        out,
        options.quiet,
        f"{run}: baseline + {plural(len(configs) - 1, 'remedy')} ({names}) x {plural(options.trials, 'trial')}, "
        "interleaved; "
        f"{options.warmup_steps} warm-up + {options.steps} timed steps each",
    )
    if len(configs) > 1:
        guess, why = estimate_text(manifest, options.warmup_steps, options.steps)
        n = len(configs) * options.trials
        _say(
            out,
            options.quiet,
            f"estimate: about {guess:.0f} s per trial ({why}): {n} trials, about {guess * n / 60:.1f} min"
            if guess is not None
            else f"estimate: {why}",
        )
    for c in skipped_upfront:
        _say(out, options.quiet, f"{c.name}: skipped ({c.reason})")

    notes: list[str] = []
    if len(configs) == 1:
        why = (
            "nothing to measure: no finding of this run has a remedy verify can apply without an edit"
            if not planned
            else "nothing to measure: every selected remedy was skipped"
        )
        notes.append(f"{why} (--only REMEDY forces a trial)")
        _say(out, options.quiet, notes[-1])
    total = len(configs) * options.trials if len(configs) > 1 else 0
    done = 0
    budget_hit = False
    interrupted = False
    place = workplace(cmd, run, options, out) if len(configs) > 1 else prepare(cmd.cwd, allow_writes=True)
    workdir = Path(tempfile.mkdtemp(prefix="gpuadvisor-verify-"))
    runner = _TrialRunner(cmd, options, workdir, num_workers, place)
    try:
        for _round in range(options.trials if len(configs) > 1 else 0):
            for c in configs:
                if c.final is not None:
                    continue
                if options.budget_s is not None and done > 0:
                    # Start a trial only if one as long as the longest so far still fits; a trial
                    # that started runs to its end (the budget may be passed by at most one trial).
                    left = options.budget_s - (time.monotonic() - started)
                    longest = max(float(r.get("wall_s", 0.0)) for cc in configs for r in cc.results)
                    if longest > left:
                        budget_hit = True
                        break
                done += 1
                result = runner.run(c, TRIAL_TIMEOUT_S)
                c.results.append(result)
                _say(out, options.quiet, f"trial {done}/{total} {c.name} ... {_progress_text(result)}")
                if (
                    result.get("status") == "failed"
                    and c.name == RemedyId.ALL_SAFE.value
                    and len(c.applies) > 1
                    and _drop_failing_members(c, configs, runner, out, options.quiet)
                ):
                    continue  # all_safe goes on without the members that fail on their own
                if result.get("status") != "ok":
                    c.final, c.reason = str(result.get("status")), str(result.get("reason"))
                    if c is baseline:
                        break
            if budget_hit or baseline.final is not None:
                break
    except KeyboardInterrupt:
        interrupted = True
        notes.append("interrupted (Ctrl-C): the remaining trials were not run")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        place.remove()

    if budget_hit:
        notes.append(
            f"--budget {options.budget_s:g} s reached after {done} of {total} trials: the rest were skipped"
        )
    if baseline.final is not None:
        for c in configs[1:]:
            if c.final is None:
                c.final, c.reason = "skipped", f"the baseline failed: {baseline.reason}"

    base_ok = [r for r in baseline.results if r.get("status") == "ok"]
    trials = [_trial_entry(c, baseline) for c in [*configs[1:], *skipped_upfront]]
    order = {p.remedy.value: i for i, p in enumerate(planned)}
    trials.sort(key=lambda t: order.get(t["remedy"], len(order)))
    cuda = any(r.get("cuda") for r in baseline.results)
    document = document_head(run, cmd, options, num_workers, started_wall)
    document["settings"]["order"] = "interleaved: baseline, then each remedy, repeated"
    document.update(
        {
            "cuda": cuda,
            "torch": base_ok[0].get("torch") if base_ok else None,
            "noise_band": noise_band_text(),
            "baseline": baseline_entry(baseline),
            "trials": trials,
            "wall_s": round(time.monotonic() - started, 3),
            "notes": notes,
        }
    )
    place.stamp(document, [r for c in configs for r in c.results])
    stamp_machine(document, machine)
    write_document(path, document)
    for t in trials:
        _say(out, options.quiet, f"{t['remedy']}: {_summary(t)}")
    _say(out, options.quiet, f"wrote {path}")
    if interrupted:
        raise KeyboardInterrupt
    return VerifyOutcome(path=path, document=document, exit_code=1 if baseline.final is not None else 0)


def _drop_failing_members(
    all_safe: _Config, configs: Sequence[_Config], runner: _TrialRunner, out: IO[str], quiet: bool
) -> bool:
    """all_safe failed: find the members that fail on their own (their own trial, else one trial each
    now) and take them out, so that one failing member does not sink the combination. True when some
    were taken out and at least one member is left (all_safe's earlier trials are discarded: another
    composition)."""
    own = {c.name: c for c in configs}
    failing: dict[str, str] = {}
    for member in all_safe.applies:
        mine = own.get(member)
        if mine is not None and mine.results:
            bad = mine.final not in (None, "ok")
            reason = str(mine.reason)
        else:
            probe = _Config(member, (member,), None, params=dict(all_safe.params))
            result = runner.run(probe, TRIAL_TIMEOUT_S)
            _say(out, quiet, f"all_safe failed: {member} alone ... {_progress_text(result)}")
            bad, reason = result.get("status") == "failed", str(result.get("reason"))
        if bad:
            failing[member] = reason
    left = tuple(r for r in all_safe.applies if r not in failing)
    if not failing or not left:
        return False
    all_safe.applies = left
    all_safe.results = []
    all_safe.left_out.update(failing)
    _say(out, quiet, f"all_safe goes on without {', '.join(failing)}")
    return True


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


def _shape(results: Sequence[Mapping[str, Any]]) -> list[int] | None:
    """The shape of the tensor counted as the batch, where every trial recorded the same one."""
    shapes = {tuple(r["samples_shape"]) for r in results if r.get("samples_shape")}
    return list(shapes.pop()) if len(shapes) == 1 else None


def baseline_entry(baseline: _Config) -> dict[str, Any]:
    base_ok = [r for r in baseline.results if r.get("status") == "ok"]
    entry: dict[str, Any] = {
        "status": baseline.final or ("ok" if base_ok else "not_run"),
        "step_time_ms": _r(_median(measured(base_ok, "step_time_ms"))),
        "samples_per_s": _r(_median(measured(base_ok, "samples_per_s"))),
        "trials": len(base_ok),
        "step_times_ms": [_r(v) for v in measured(base_ok, "step_time_ms")],
        "samples_per_s_trials": [_r(v) for v in measured(base_ok, "samples_per_s")],
        "step_detection": base_ok[0].get("step_detection") if base_ok else None,
        "samples_shape": _shape(base_ok),
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


def _label_as_measured(label: str, multiplier: int, entry: Mapping[str, Any]) -> str:
    """A batch lever's label, with the batch sizes the input's shape showed where they are not
    `multiplier` apart (a --batch-size multiplied from a count that was not the batch)."""
    sizes = entry.get("batch_sizes")
    if entry.get("changes_batch") and isinstance(sizes, list) and other_factor(sizes, multiplier):
        return f"{label} (batch {sizes[0]} -> {sizes[1]})"
    return label


def _batch_entry(trials: Sequence[Mapping[str, Any]], levers: Mapping[str, ex.ExploreLever]) -> dict[str, Any] | None:
    """The fastest lever that changes the batch with a `faster` verdict in samples/s, reported beside the
    best configuration (never inside it: a different batch is a different optimization)."""
    measured = [
        t
        for t in trials
        if t.get("lever") in levers
        and levers[str(t["lever"])].spec.changes_batch
        and t.get("status") == "ok"
        and t.get("verdict") == "faster"
    ]
    if not measured:
        return None
    t = max(measured, key=lambda x: float(x["speedup"]))
    text = (
        f"a larger batch: {t.get('label')}: {t['speedup']:.2f}x in samples/s ({t['low']:.2f}-{t['high']:.2f}, "
        f"{plural(t['trials'], 'trial')}), measured alone; it changes the optimization: "
        + (t.get("note") or "scale the learning rate and re-check accuracy")
    )
    keys = ("lever", "label", "speedup", "low", "high", "trials", "verdict", "compared_in", "change", "note")
    return {**{k: t.get(k) for k in keys}, "text": text}


def _summary(t: Mapping[str, Any]) -> str:
    if t.get("status") != "ok":
        return f"{t.get('status')} ({t.get('reason')})"
    unit = "samples/s" if t.get("compared_in") == "samples_per_s" else "step time"
    where = f", measured on {t['measured_on']}" if t.get("measured_on") else ""
    return (
        f"{t['speedup']:.2f}x in {unit} ({t['low']:.2f}-{t['high']:.2f}, {plural(t['trials'], 'trial')}, "
        f"{t['verdict']}{where})"
    )


# ---------------------------------------------------------------------------------------------- where


def workplace(cmd: RecordedCommand, run: Path, options: VerifyOptions, out: IO[str]) -> Workplace:
    """Where the trials run (gpuadvisor/verify/scratch.py), said before the first trial; UsageError
    when the working directory cannot be copied and --allow-writes is off."""
    place = prepare(cmd.cwd, allow_writes=options.allow_writes, skip=[run])
    _say(out, options.quiet, place.text)
    return place


def output_path(run: Path, output: Path | None) -> Path:
    """Where verify.json goes: `output` when given, else RUN/verify.json, refused (UsageError) when the
    run directory holds recordings tracked by git (the repository's sample runs): measurements made
    here do not belong next to them."""
    if output is not None:
        path = output / VERIFY_FILE if output.is_dir() else output
        check_output(path, [run])  # never over a file of the run directory, a FIFO, a device node
        return path
    if _tracked_by_git(run):
        raise UsageError(
            f"{run} is tracked by git (recordings kept in a repository): verify does not write "
            f"{VERIFY_FILE} next to them; pass -o FILE to choose where it goes"
        )
    check_output(run / VERIFY_FILE, [run], option="verify.json at")
    return run / VERIFY_FILE


def _tracked_by_git(run: Path) -> bool:
    git = shutil.which("git")
    if git is None:
        return False
    try:
        r = subprocess.run(
            # no fsmonitor: a received run directory may ship a .git/config naming a program for it
            [git, "-c", "core.fsmonitor=false", "-C", str(run), "ls-files", "--error-unmatch", rundir.MANIFEST],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def check_machine(
    manifest: Mapping[str, Any], environment: Mapping[str, Any], cmd: RecordedCommand, *, allow_other: bool
) -> dict[str, Any]:
    """The recording's machine and this one (probed with the recorded interpreter), and what differs.
    A difference is a UsageError unless `allow_other`: numbers measured elsewhere do not say what the
    recording's machine would gain."""
    recorded = recorded_machine(manifest, environment)
    # the machine as the trials' interpreter sees it, from here: nothing the run directory names runs
    here = probe(cmd.python, Path(os.getcwd()))
    here["cwd"] = os.getcwd()
    diffs = compare_machines(recorded, here)
    machine = {
        "recorded": recorded,
        "measured": here,
        "same": not diffs,
        "differences": diffs,
        "recorded_text": describe(recorded),
        "measured_text": describe(here),
    }
    if diffs and not allow_other:
        raise UsageError(
            "verify measures on the recording's machine, and this one differs (or could not be "
            "checked): " + "; ".join(diffs) + ". Measure where the run was recorded, or pass "
            "--allow-other-machine (every number then says where it was measured)"
        )
    return machine


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


# ---------------------------------------------------------------------------------------------- explore

EXPLORE_BUDGET_S = 1800.0  # without --budget: at most 30 minutes of trials


def _lever_label(lv: ex.ExploreLever, num_workers: int, multiplier: int) -> str:
    params = lv.lever.param_dict()
    if lv.takes_value:
        return f"script {lv.script_flag} x{multiplier}"
    if lv.script_flag:
        return f"script {lv.script_flag}"
    if params.get("num_workers") == "auto":
        return f"num_workers={num_workers}"
    if "prefetch_factor" in params:
        return f"prefetch_factor={params['prefetch_factor']}"
    if params.get("multiplier") == "auto":
        return f"batch x{multiplier}"
    return lv.name


def _changes(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in results:
        for c in r.get("changes") or []:
            if c not in out:
                out.append(c)
    return out


def explore_run(
    run: Path,
    path: Path,
    cmd: RecordedCommand,
    manifest: Mapping[str, Any],
    environment: Mapping[str, Any],
    options: VerifyOptions,
    out: IO[str],
    num_workers: int,
    machine: Mapping[str, Any],
    findings: Sequence[Mapping[str, Any]],
) -> VerifyOutcome:
    bad = ex.unknown_only(options.only)
    if bad:
        names = sorted({lv.name for _, lv in explore_levers()})
        raise UsageError(
            f"--only {', '.join(bad)}: not an explore lever or remedy (levers: {', '.join(names)})"
        )
    quiet = options.quiet

    def say(msg: str) -> None:
        _say(out, quiet, msg)

    here = machine.get("measured") if isinstance(machine.get("measured"), Mapping) else {}
    assert isinstance(here, Mapping)
    bf16 = here.get("bf16_supported")
    flags = ex.script_flags(cmd.script_path() if cmd.kind == "script" else None, cmd.args)
    levers = ex.build_levers(
        environment,
        num_workers=num_workers,
        env=os.environ,
        bf16_supported=bf16 if isinstance(bf16, bool) else None,
        flags=flags,
        only=options.only,
    )
    multiplier = batch_multiplier(findings)  # the small-batch finding's own multiplier, else 4
    budget = options.budget_s if options.budget_s is not None else EXPLORE_BUDGET_S
    predicted = _predicted_by_lever(levers, findings)
    singles = [
        lv
        for lv in levers
        if lv.skip_reason is None and (not lv.lever.slow or predicted.get(lv.name, 0.0) > 1.0)
    ]
    singles.sort(key=lambda lv: -predicted.get(lv.name, 0.0))
    n_single_trials = (1 + len(singles)) * options.trials
    guess, why = ex.estimate_text(manifest, options.warmup_steps, options.steps)
    say(
        f"explore {run}: {len(singles)} levers to measure alone ({', '.join(lv.name for lv in singles) or 'none'}), "
        f"{len(levers) - len(singles)} not applicable alone or slow; baseline + {len(singles)} levers x {options.trials} trials "
        f"= {n_single_trials} trial processes, then the best combination grows (the best and up to "
        f"{ex.MAX_CANDIDATES} candidates per round; compile levers last unless a finding predicts them); "
        f"budget {budget:.0f} s"
    )
    ahead = ""
    if predicted:
        ahead = ", ".join(f"{lv.name} {predicted[lv.name]:.2f}x" for lv in singles if lv.name in predicted)
    if predicted and ahead:
        say(f"first the levers the findings predict (predicted speed-up): {ahead}")
    if guess is not None:
        total = guess * n_single_trials
        fits = "" if total <= budget else "; more than the budget: the search stops when the budget ends"
        say(f"estimate: about {guess:.0f} s per trial ({why}): the singles about {total / 60:.1f} min{fits}")
    else:
        say(f"estimate: {why}; the first trial gives one")

    started_wall = time.time()
    started = time.monotonic()
    place = workplace(cmd, run, options, out)
    workdir = Path(tempfile.mkdtemp(prefix="gpuadvisor-explore-"))
    runner = _TrialRunner(cmd, options, workdir, num_workers, place)
    first: list[float] = []
    # the count each value lever multiplied in its first trial: its later trials run the same command
    # (a batch axis learnt meanwhile changes the count for the ladder's next rungs only)
    counted: dict[str, int] = {}

    def run_trial(names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
        lvs = [explorer.levers[n] for n in names]  # the levers, and the batch ladder's rungs
        remedies, params, flags = ex.trial_setup(lvs)
        extra: list[str] = []
        texts: list[tuple[ex.ExploreLever, str, str]] = []
        for flag in flags:
            lv = next(x for x in lvs if x.script_flag == flag)
            if not lv.takes_value:
                extra.append(flag)
                texts.append((lv, f"+ {flag}", f"the script's own {flag} argument added to the command"))
                continue
            per_step = counted.get(lv.name) or (
                _script_value(explorer.baseline.ok(), flag)
                or _baseline_batch(explorer.baseline.ok(), explorer.batch_axis())
            )
            m = lv.multiplier or multiplier
            if per_step is None:
                return {
                    "status": "skipped",
                    "reason": f"the baseline trials saw no value of {flag} and counted no samples at the "
                    f"model's input: {flag} x {m} has nothing to multiply",
                    "wall_s": 0.0,
                }
            counted[lv.name] = per_step
            value = per_step * m
            extra += [flag, str(value)]
            texts.append(
                (
                    lv,
                    f"+ {flag} {value}",
                    f"the script's own {flag} argument set to {value} ({per_step} x {m})",
                )
            )
        batch = None
        if RemedyId.LARGER_BATCH.value in remedies:
            batch = next((x.multiplier for x in lvs if x.multiplier and not x.script_flag), None) or multiplier
        config = _Config("+".join(names) or BASELINE, remedies, None, params=params, extra_args=tuple(extra))
        config.batch_multiplier = batch
        result = runner.run(config, timeout_s)
        for lv, after, text in reversed(texts):
            change = {
                "remedy": lv.remedy.value,
                "what": "command line",
                "before": " ".join(cmd.args) or "(no arguments)",
                "after": after,
                "where": None,
                "text": text,
            }
            result.setdefault("changes", []).insert(0, change)
        if not first:
            first.append(float(result.get("wall_s") or 0.0))
            say(
                f"the first trial took {first[0]:.0f} s: the singles take about "
                f"{first[0] * n_single_trials / 60:.1f} min"
            )
        return result

    def remaining() -> float:
        return budget - (time.monotonic() - started)

    def on_baseline(result: Mapping[str, Any]) -> None:
        declared = result.get("script_options")
        if not isinstance(declared, list):
            return
        for lv, flag in ex.declared_at_run_time(levers, {str(o) for o in declared}, cmd.args):
            say(
                f"{lv.name}: the script's argument parser declares {flag} (seen in the baseline trial): measured too"
            )

    explorer = ex.Explorer(
        levers,
        trials=options.trials,
        run_trial=run_trial,
        remaining=remaining,
        say=say,
        trial_timeout_s=TRIAL_TIMEOUT_S,
        predicted=predicted,
        on_baseline=on_baseline,
        batch_multiplier=multiplier,
    )
    notes: list[str] = []
    interrupted = False
    try:
        explorer.run(
            ex.applies_with(
                environment,
                num_workers=num_workers,
                env=os.environ,
                bf16_supported=bf16 if isinstance(bf16, bool) else None,
            )
        )
    except KeyboardInterrupt:
        interrupted = True
        explorer.stopped = "interrupted (Ctrl-C)"
        notes.append("interrupted (Ctrl-C): the trials measured so far are kept")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        place.remove()
    if explorer.budget_hit:
        notes.append(f"the explore budget of {budget:g} s ended after {explorer.done} trials")

    # verify.json: the baseline, one classic trial entry per lever measured alone, the search
    base = _Config(BASELINE, (), None, results=explorer.baseline.results, final=explorer.baseline.final,
                   reason=explorer.baseline.reason)  # fmt: skip
    trials: list[dict[str, Any]] = []
    for lv in explorer.levers.values():  # the levers, then the batch ladder's rungs measured
        m = lv.multiplier or multiplier
        rules = tuple(dict.fromkeys(str(f.get("rule")) for f in findings if lv.remedy in finding_remedies(f)))
        planned = PlannedTrial(
            remedy=lv.remedy,
            applies=(lv.remedy,),
            findings=rules,
            category=lv.spec.category,
            skip_reason=lv.skip_reason,
            batch_multiplier=m if lv.spec.changes_batch else None,
            predicted_speedup=None if lv.multiplier else predicted.get(lv.name),
        )
        single = explorer.configs.get((lv.name,))
        c = _Config(lv.name, (lv.remedy.value,), planned)
        in_steps = any(lv.name in cand["levers"] for step in explorer.steps for cand in step["candidates"])
        if lv.skip_reason is not None:
            c.final, c.reason = "skipped", lv.skip_reason
        elif single is not None and single.results:
            c.results, c.final, c.reason = single.results, single.final, single.reason
        elif lv.lever.slow:
            c.final = "skipped"
            c.reason = (
                "not measured alone (its warm-up takes minutes): tried on top of the best configuration "
                "(explore.steps)"
                if in_steps
                else f"not measured: slow levers come last and the search stopped first ({explorer.stopped})"
            )
        if base.final is not None and c.final is None:
            c.final, c.reason = "skipped", f"the baseline failed: {base.reason}"
        entry = _trial_entry(c, base)
        label = _label_as_measured(_lever_label(lv, num_workers, m), m, entry)
        entry.update(lever=lv.name, lever_title=lv.lever.title, label=label)
        if lv.multiplier:
            entry["rung_of"] = lv.lever.name  # a rung of the batch ladder
        if lv.failed and entry.get("status") == "ok":
            entry["dropped"] = lv.failed  # worked alone, failed in a combination
        trials.append(entry)

    best_entry: dict[str, Any] | None = None
    best_text = None
    if explorer.best is not None:
        best = explorer.best
        cmp = explorer.comparison(best)
        members = [explorer.levers[n] for n in best.levers]
        labels = [_lever_label(lv, num_workers, multiplier) for lv in members]
        changes = _changes(best.ok())
        if cmp is not None:
            best_text = (
                f"best measured configuration: {' + '.join(labels)}: {ex.speed_text(cmp, len(best.ok()))}"
            )
            best_entry = {
                "levers": list(best.levers),
                "labels": labels,
                "remedies": list(dict.fromkeys(lv.remedy.value for lv in members)),
                "speedup": round(cmp.speedup, 3),
                "low": round(cmp.low, 3),
                "high": round(cmp.high, 3),
                "verdict": cmp.verdict.value,
                "trials": len(best.ok()),
                "compared_in": "step_time_ms",
                "step_times_ms": [r.get("step_time_ms") for r in best.ok()],
                "changes": changes,
                "change": "; ".join(c["text"] for c in changes) if changes else None,
                "changes_numerics": any(lv.spec.changes_numerics for lv in members),
                "text": best_text,
            }
            if best_entry["changes_numerics"]:
                best_entry["note"] = "lower-precision math: re-check accuracy (loss curve) before keeping it"

    batch_entry = _batch_entry(trials, explorer.levers)

    document = document_head(run, cmd, options, num_workers, started_wall)
    document["settings"].update(
        order="explore: singles interleaved with the baseline, then greedy growth (baseline, best, candidates)",
        explore=True,
        budget_s=budget,
    )
    base_ok = explorer.baseline.ok()
    document.update(
        {
            "cuda": any(r.get("cuda") for r in explorer.baseline.results),
            "torch": base_ok[0].get("torch") if base_ok else None,
            "noise_band": noise_band_text(),
            "baseline": baseline_entry(base),
            "trials": trials,
            "explore": {
                "levers": [lv.name for lv in levers],
                "script_flags": sorted(flags),
                "steps": explorer.steps,
                "best": best_entry,
                "batch": batch_entry,
                "rungs": list(explorer.rungs),
                "stopped": explorer.stopped,
                "trials_run": explorer.done,
                "estimate_s_per_trial": None if guess is None else round(guess, 1),
            },
            "wall_s": round(time.monotonic() - started, 3),
            "notes": notes,
        }
    )
    place.stamp(document, [r for c in (explorer.baseline, *explorer.configs.values()) for r in c.results])
    stamp_machine(document, machine)
    write_document(path, document)
    where = f" [measured on {machine.get('measured_text')}]" if not machine.get("same") else ""
    for t in trials:
        say(f"{t['lever']}: {_summary(t)}")
    if best_entry is not None:
        say(f"{best_text}{where}")
        say(f"  changes: {best_entry['change'] or 'none recorded'}")
        if best_entry.get("note"):
            say(f"  note: {best_entry['note']}")
    else:
        say(f"no best configuration: {explorer.stopped}{where}")
    if batch_entry is not None:
        say(f"{batch_entry['text']}{where}")
    if explorer.stopped:
        say(f"search stopped: {explorer.stopped}")
    say(f"wrote {path}")
    if interrupted:
        raise KeyboardInterrupt
    return VerifyOutcome(path=path, document=document, exit_code=1 if base.final is not None else 0)
