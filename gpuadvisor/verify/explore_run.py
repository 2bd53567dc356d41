"""`gpuadvisor verify RUN --explore`: the search of `gpuadvisor.verify.explore` run with real trial
processes, and its part of verify.json (`explore`, one trial entry per lever).

Does not import torch (the trial children do).
"""

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
from gpuadvisor.verify.plan import (
    PlannedTrial,
    batch_multiplier,
    finding_remedies,
    predicted_speedup,
)
from gpuadvisor.verify.results import noise_band_text
from gpuadvisor.verify.stats import other_factor
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
    write_document,
)
from gpuadvisor.words import plural


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


def _label_as_measured(label: str, multiplier: int, entry: Mapping[str, Any]) -> str:
    """A batch lever's label, with the batch sizes the input's shape showed where they are not
    `multiplier` apart (a --batch-size multiplied from a count that was not the batch)."""
    sizes = entry.get("batch_sizes")
    if entry.get("changes_batch") and isinstance(sizes, list) and other_factor(sizes, multiplier):
        return f"{label} (batch {sizes[0]} -> {sizes[1]})"
    return label


def _batch_entry(
    trials: Sequence[Mapping[str, Any]], levers: Mapping[str, ex.ExploreLever]
) -> dict[str, Any] | None:
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
        say_to(out, quiet, msg)

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
    workdir = Path(tempfile.mkdtemp(prefix="gpuadvisor-explore-"))
    runner = TrialRunner(cmd, options, workdir, num_workers)
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
            batch = (
                next((x.multiplier for x in lvs if x.multiplier and not x.script_flag), None) or multiplier
            )
        config = RunConfig(
            "+".join(names) or BASELINE, remedies, None, params=params, extra_args=tuple(extra)
        )
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
    if explorer.budget_hit:
        notes.append(f"the explore budget of {budget:g} s ended after {explorer.done} trials")

    # verify.json: the baseline, one classic trial entry per lever measured alone, the search
    base = RunConfig(BASELINE, (), None, results=explorer.baseline.results, final=explorer.baseline.final,
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
        c = RunConfig(lv.name, (lv.remedy.value,), planned)
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
        entry = trial_entry(c, base)
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
    stamp_machine(document, machine)
    write_document(path, document)
    where = f" [measured on {machine.get('measured_text')}]" if not machine.get("same") else ""
    for t in trials:
        say(f"{t['lever']}: {summary_text(t)}")
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
