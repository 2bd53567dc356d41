"""`verify --explore`: the trials of the search (explore.py) run as verify runs any trial, and the
result written into verify.json (`explore`, plus one `trials` entry per lever measured alone, so the
findings whose remedy was measured gain `verified` as with a plain verify)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from gpuadvisor.errors import UsageError
from gpuadvisor.remedies import RemedyId, explore_levers
from gpuadvisor.verify import explore as ex
from gpuadvisor.verify.plan import DEFAULT_BATCH_MULTIPLIER, PlannedTrial, finding_remedies, predicted_speedup
from gpuadvisor.verify.results import noise_band_text
from gpuadvisor.verify.runner import (
    BASELINE,
    TRIAL_TIMEOUT_S,
    RecordedCommand,
    VerifyOptions,
    VerifyOutcome,
    _Config,
    _say,
    _summary,
    _trial_entry,
    _TrialRunner,
    baseline_entry,
    document_head,
    stamp_machine,
    write_document,
)

__all__ = ["EXPLORE_BUDGET_S", "explore_run"]

EXPLORE_BUDGET_S = 1800.0  # without --budget: at most 30 minutes of trials


def _lever_label(lv: ex.ExploreLever, num_workers: int, multiplier: int) -> str:
    params = lv.lever.param_dict()
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
        raise UsageError(f"--only {', '.join(bad)}: not an explore lever or remedy (levers: {', '.join(names)})")
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
    multiplier = DEFAULT_BATCH_MULTIPLIER
    budget = options.budget_s if options.budget_s is not None else EXPLORE_BUDGET_S
    singles = [lv for lv in levers if lv.skip_reason is None and not lv.lever.slow]
    n_single_trials = (1 + len(singles)) * options.trials
    guess, why = ex.estimate_text(manifest, options.warmup_steps, options.steps)
    say(
        f"explore {run}: {len(singles)} levers to measure alone ({', '.join(lv.name for lv in singles) or 'none'}), "
        f"{len(levers) - len(singles)} not applicable alone or slow; baseline + {len(singles)} levers x {options.trials} trials "
        f"= {n_single_trials} trial processes, then the best combination grows (the best and up to "
        f"{ex.MAX_CANDIDATES} candidates per round; compile levers last); budget {budget:.0f} s"
    )
    if guess is not None:
        total = guess * n_single_trials
        fits = "" if total <= budget else "; more than the budget: the search stops when the budget ends"
        say(f"estimate: about {guess:.0f} s per trial ({why}): the singles about {total / 60:.1f} min{fits}")
    else:
        say(f"estimate: {why}; the first trial gives one")

    by_name = {lv.name: lv for lv in levers}
    started_wall = time.time()
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="gpuadvisor-explore-"))
    runner = _TrialRunner(cmd, options, workdir, num_workers)
    first: list[float] = []

    def run_trial(names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
        lvs = [by_name[n] for n in names]
        remedies, params, extra = ex.trial_setup(lvs)
        batch = multiplier if RemedyId.LARGER_BATCH.value in remedies else None
        config = _Config("+".join(names) or BASELINE, remedies, None, params=params, extra_args=extra)
        config.batch_multiplier = batch
        result = runner.run(config, timeout_s)
        for flag in extra:
            lv = next(x for x in lvs if x.script_flag == flag)
            change = {
                "remedy": lv.remedy.value,
                "what": "command line",
                "before": " ".join(cmd.args) or "(no arguments)",
                "after": f"+ {flag}",
                "where": None,
                "text": f"the script's own {flag} argument added to the command",
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

    explorer = ex.Explorer(
        levers,
        trials=options.trials,
        run_trial=run_trial,
        remaining=remaining,
        say=say,
        trial_timeout_s=TRIAL_TIMEOUT_S,
    )
    notes: list[str] = []
    interrupted = False
    try:
        explorer.run(
            ex.applies_with(
                environment, num_workers=num_workers, env=os.environ, bf16_supported=bf16 if isinstance(bf16, bool) else None
            )
        )
    except KeyboardInterrupt:
        interrupted = True
        explorer.stopped = "interrupted (Ctrl-C)"
        notes.append("interrupted (Ctrl-C): the trials measured so far are kept")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if explorer.budget_hit:
        notes.append(f"the explore budget of {budget:g} s ended after {explorer.done} trials")

    # verify.json: the baseline, one classic trial entry per lever measured alone, the search
    base = _Config(BASELINE, (), None, results=explorer.baseline.results, final=explorer.baseline.final,
                   reason=explorer.baseline.reason)  # fmt: skip
    trials: list[dict[str, Any]] = []
    for lv in levers:
        rules = tuple(dict.fromkeys(str(f.get("rule")) for f in findings if lv.remedy in finding_remedies(f)))
        preds = [
            p
            for p in (predicted_speedup(f) for f in findings if lv.remedy in finding_remedies(f))
            if p is not None
        ]
        planned = PlannedTrial(
            remedy=lv.remedy,
            applies=(lv.remedy,),
            findings=rules,
            category=lv.spec.category,
            skip_reason=lv.skip_reason,
            batch_multiplier=multiplier if lv.spec.changes_batch else None,
            predicted_speedup=max(preds) if preds else None,
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
        entry.update(lever=lv.name, lever_title=lv.lever.title, label=_lever_label(lv, num_workers, multiplier))
        if lv.failed and entry.get("status") == "ok":
            entry["dropped"] = lv.failed  # worked alone, failed in a combination
        trials.append(entry)

    best_entry: dict[str, Any] | None = None
    best_text = None
    if explorer.best is not None:
        best = explorer.best
        cmp = explorer.comparison(best)
        members = [by_name[n] for n in best.levers]
        labels = [_lever_label(lv, num_workers, multiplier) for lv in members]
        changes = _changes(best.ok())
        if cmp is not None:
            best_text = f"best measured configuration: {' + '.join(labels)}: {ex.speed_text(cmp, len(best.ok()))}"
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
                "stopped": explorer.stopped,
                "trials_run": explorer.done,
                "estimate_s_per_trial": None if guess is None else round(guess, 1),
            },
            "wall_s": round(time.monotonic() - started, 3),
            "notes": notes,
        }
    )
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
    if explorer.stopped:
        say(f"search stopped: {explorer.stopped}")
    say(f"wrote {path}")
    if interrupted:
        raise KeyboardInterrupt
    return VerifyOutcome(path=path, document=document, exit_code=1 if base.final is not None else 0)
