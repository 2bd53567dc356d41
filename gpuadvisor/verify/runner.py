"""`gpuadvisor verify RUN`: plan the trials, run them interleaved with baseline trials, write verify.json.
With --explore (`explore_run`): the search of `gpuadvisor.verify.explore` run with the same trials.

Does not import torch (the trial children do). The run directory is read, never written, except for
RUN/verify.json (atomically). Trial children run in their own session with their output in a
temporary folder; a child still alive after its time limit is killed with its process group.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from gpuadvisor import rundir
from gpuadvisor.errors import InputError, UsageError
from gpuadvisor.outputs import check_output
from gpuadvisor.received import read_json_file
from gpuadvisor.remedies import RemedyId
from gpuadvisor.runinfo import read_environment, read_manifest
from gpuadvisor.verify.command import recorded_command, recorded_python_note
from gpuadvisor.verify.explore import estimate_text
from gpuadvisor.verify.explore_run import explore_run
from gpuadvisor.verify.measure import measurement_text
from gpuadvisor.verify.plan import (
    default_num_workers,
    plan_trials,
)
from gpuadvisor.verify.probe import compare as compare_machines
from gpuadvisor.verify.probe import describe, probe, recorded_machine
from gpuadvisor.verify.results import VERIFY_FILE, noise_band_text
from gpuadvisor.verify.scratch import prepare
from gpuadvisor.verify.trials import (
    BASELINE,
    TRIAL_TIMEOUT_S,
    RecordedCommand,
    RunConfig,
    TrialRunner,
    VerifyOptions,
    VerifyOutcome,
    baseline_entry,
    document_head,
    say_to,
    stamp_machine,
    summary_text,
    trial_entry,
    where_text,
    workplace,
    write_document,
)
from gpuadvisor.words import plural

# The caller's analysis of a run without findings.json: the findings as JSON objects, or the whole
# analysis document (findings.json's form: its `findings` and the top findings' combined `prediction`).
Analyzer = Callable[[Path], "Sequence[Mapping[str, Any]] | Mapping[str, Any]"]

__all__ = ["VerifyOptions", "VerifyOutcome", "recorded_command", "verify_run"]


def _analysis_of(run_dir: Path, analyze: Analyzer | None) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """RUN/findings.json's findings and its combined `prediction` (the top findings' remedies replayed
    together), else a fresh analysis of the run by the caller's `analyze` (verify runs below the
    analysis and does not import it)."""
    doc: Any = read_json_file(run_dir, rundir.FINDINGS)  # inside the run directory only, bounded
    if not (isinstance(doc, dict) and isinstance(doc.get("findings"), list)):
        if analyze is None:
            raise UsageError(
                f"{run_dir} has no {rundir.FINDINGS}: analyze it first (gpuadvisor report {run_dir})"
            )
        doc = analyze(run_dir)
    if isinstance(doc, Mapping):
        findings, combined = doc.get("findings") or [], doc.get("prediction")
    else:
        findings, combined = doc, None
    return (
        [dict(f) for f in findings if isinstance(f, Mapping)],
        dict(combined) if isinstance(combined, Mapping) else None,
    )


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
    run that has no findings.json yet (its findings as JSON objects, or the analysis document:
    `gpuadvisor.commands.verify.analysis_document`)."""
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
        say_to(
            out, options.quiet, f"measuring on another machine than the recording's: {where_text(machine)}"
        )
    python_note = recorded_python_note(manifest, cmd) if argv is None else None
    if python_note:
        say_to(out, options.quiet, python_note)
    machine["notes"] = [*read_notes, *([python_note] if python_note else [])]  # into verify.json's notes
    num_workers = options.num_workers or default_num_workers(explore=options.explore)
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
            *_analysis_of(run, analyze),
        )
    planned = plan_trials(_analysis_of(run, analyze)[0], environment, only=options.only, num_workers=num_workers)

    started_wall = time.time()
    started = time.monotonic()
    baseline = RunConfig(BASELINE, (), None)
    configs = [baseline]
    skipped_upfront: list[RunConfig] = []
    for p in planned:
        c = RunConfig(p.remedy.value, tuple(r.value for r in p.applies), p)
        if p.skip_reason is not None:
            c.final, c.reason = "skipped", p.skip_reason
            skipped_upfront.append(c)
        else:
            configs.append(c)
    names = ", ".join(c.name for c in configs[1:]) or "none"
    say_to(
        out,
        options.quiet,
        f"{run}: baseline + {plural(len(configs) - 1, 'remedy')} ({names}) x {plural(options.trials, 'trial')}, "
        "interleaved; "
        f"{options.warmup_steps} warm-up + {options.steps} timed steps each",
    )
    if len(configs) > 1:
        guess, why = estimate_text(manifest, options.warmup_steps, options.steps)
        n = len(configs) * options.trials
        say_to(
            out,
            options.quiet,
            f"estimate: about {guess:.0f} s per trial ({why}): {n} trials, about {guess * n / 60:.1f} min"
            if guess is not None
            else f"estimate: {why}",
        )
    for c in skipped_upfront:
        say_to(out, options.quiet, f"{c.name}: skipped ({c.reason})")

    notes: list[str] = []
    if len(configs) == 1:
        why = (
            "nothing to measure: no finding of this run has a remedy verify can apply without an edit"
            if not planned
            else "nothing to measure: every selected remedy was skipped"
        )
        notes.append(f"{why} (--only REMEDY forces a trial)")
        say_to(out, options.quiet, notes[-1])
    total = len(configs) * options.trials if len(configs) > 1 else 0
    done = 0
    budget_hit = False
    interrupted = False
    place = workplace(cmd, run, options, out) if len(configs) > 1 else prepare(cmd.cwd, allow_writes=True)
    workdir = Path(tempfile.mkdtemp(prefix="gpuadvisor-verify-"))
    runner = TrialRunner(cmd, options, workdir, num_workers, place)
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
                say_to(out, options.quiet, f"trial {done}/{total} {c.name} ... {measurement_text(result)}")
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
    trials = [trial_entry(c, baseline) for c in [*configs[1:], *skipped_upfront]]
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
        say_to(out, options.quiet, f"{t['remedy']}: {summary_text(t)}")
    say_to(out, options.quiet, f"wrote {path}")
    if interrupted:
        raise KeyboardInterrupt
    return VerifyOutcome(path=path, document=document, exit_code=1 if baseline.final is not None else 0)


def _drop_failing_members(
    all_safe: RunConfig, configs: Sequence[RunConfig], runner: TrialRunner, out: IO[str], quiet: bool
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
            probe = RunConfig(member, (member,), None, params=dict(all_safe.params))
            result = runner.run(probe, TRIAL_TIMEOUT_S)
            say_to(out, quiet, f"all_safe failed: {member} alone ... {measurement_text(result)}")
            bad, reason = result.get("status") == "failed", str(result.get("reason"))
        if bad:
            failing[member] = reason
    left = tuple(r for r in all_safe.applies if r not in failing)
    if not failing or not left:
        return False
    all_safe.applies = left
    all_safe.results = []
    all_safe.left_out.update(failing)
    say_to(out, quiet, f"all_safe goes on without {', '.join(failing)}")
    return True


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
    """The recording's machine and this one (probed with the trials' interpreter, from this process's
    folder: nothing the run directory names runs), and what differs.
    A difference is a UsageError unless `allow_other`: numbers measured elsewhere do not say what the
    recording's machine would gain."""
    recorded = recorded_machine(manifest, environment)
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
