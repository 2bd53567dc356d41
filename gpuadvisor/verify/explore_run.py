"""`gpuadvisor verify RUN --explore`: the search of `gpuadvisor.verify.explore` run with real trial
processes, and its part of verify.json (`explore`, one trial entry per lever).

Does not import torch (the trial children do).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from gpuadvisor.errors import UsageError
from gpuadvisor.remedies import RemedyId, explore_levers
from gpuadvisor.verify import explore as ex
from gpuadvisor.verify.measure import across_trials
from gpuadvisor.verify.plan import (
    PlannedTrial,
    batch_multiplier,
    finding_remedies,
    predicted_speedup,
)
from gpuadvisor.verify.results import noise_band_text
from gpuadvisor.verify.stats import other_factor
from gpuadvisor.verify.switches import declared_in_source, merged, recorded_options, took_effect
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
    workplace,
    write_document,
)
from gpuadvisor.words import plural


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


# Without --budget the budget comes from the first baseline trial: its length x the trials the search
# plans (the first round, FOLLOW_UP rounds, a predicted batch) x this slack (compile warm-ups, noise).
BUDGET_SLACK = 1.25


def _lever_label(lv: ex.ExploreLever, num_workers: int, multiplier: int) -> str:
    params = lv.lever.param_dict()
    if lv.takes_value:
        return f"script {lv.script_flag} x{multiplier}"
    if lv.switch is not None:
        return f"script {lv.switch.text}"
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
    combined: Mapping[str, Any] | None = None,
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
    bf16_ok = bf16 if isinstance(bf16, bool) else None
    in_source = declared_in_source(cmd.script_path() if cmd.kind == "script" else None)
    levers = ex.build_levers(
        environment, num_workers=num_workers, env=os.environ, bf16_supported=bf16_ok,
        options=in_source, args=cmd.args, only=options.only,
    )  # fmt: skip
    env_ok = ex.applies_with(environment, num_workers=num_workers, env=os.environ, bf16_supported=bf16_ok)
    multiplier = batch_multiplier(findings)  # the small-batch finding's own multiplier, else 4
    budget: dict[str, float | None] = {"s": options.budget_s}  # without --budget: set by the first trial
    predicted = _predicted_by_lever(levers, findings)
    applicable = [lv.name for lv in levers if lv.skip_reason is None]
    guess, why = ex.estimate_text(manifest, options.warmup_steps, options.steps)
    say(
        f"explore {run}: {plural(len(applicable), 'lever')} {'applies' if len(applicable) == 1 else 'apply'} "
        f"({', '.join(applicable) or 'none'}), "
        + (f"{len(levers) - len(applicable)} not alone; " if len(levers) > len(applicable) else "")
        + (
            "the levers named by --only are measured alone, then the best combination grows"
            if options.only
            else "guided by the findings' predicted remedy sets and each configuration's measured bottleneck"
        )
        + "; "
        + (f"budget {options.budget_s:.0f} s" if options.budget_s is not None else "the first baseline trial sizes the budget")
    )
    say(f"estimate: about {guess:.0f} s per trial ({why})" if guess is not None else f"estimate: {why}; the first trial gives one")

    started_wall = time.time()
    started = time.monotonic()
    place = workplace(cmd, run, options, out)
    workdir = Path(tempfile.mkdtemp(prefix="gpuadvisor-explore-"))
    runner = TrialRunner(cmd, options, workdir, num_workers, place)
    first: list[dict[str, Any]] = []
    # the count each value lever multiplied in its first trial: its later trials run the same command
    # (a batch axis learnt meanwhile changes the count for the ladder's next rungs only)
    counted: dict[str, int] = {}

    def run_trial(names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
        lvs = [explorer.levers[n] for n in names]  # the levers, and the batch ladder's rungs
        remedies, params, switched = ex.trial_setup(lvs)
        extra: list[str] = []
        texts: list[tuple[ex.ExploreLever, str, str]] = []
        for lv in switched:
            assert lv.switch is not None
            if not lv.takes_value:
                extra += lv.switch.args
                texts.append((lv, f"+ {lv.switch.text}", f"the script's own {lv.switch.text} added to the command"))
                continue
            flag = lv.switch.flag
            parsed = lv.switch.option.value
            per_step = counted.get(lv.name) or (
                parsed
                if isinstance(parsed, int) and not isinstance(parsed, bool) and parsed > 0
                else _baseline_batch(explorer.baseline.ok(), explorer.batch_axis())
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
            texts.append((lv, f"+ {flag} {value}", f"the script's own {flag} argument set to {value} ({per_step} x {m})"))
        batch = None
        if RemedyId.LARGER_BATCH.value in remedies:
            batch = next((x.multiplier for x in lvs if x.multiplier and not x.script_flag), None) or multiplier
        config = RunConfig("+".join(names) or BASELINE, remedies, None, params=params, extra_args=tuple(extra))
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
        for lv in switched:
            refused = None if lv.takes_value else took_effect(lv.switch, result) if lv.switch else None
            if refused is not None and result.get("status") == "ok":
                # the script refused this lever's switch: Explorer.measure drops the lever, not the set
                result.update(status="failed", reason=refused, refused_lever=lv.name)
        if not first:
            first.append(result)
        return result

    def remaining() -> float | None:
        return None if budget["s"] is None else budget["s"] - (time.monotonic() - started)

    used: dict[str, dict[str, Any]] = {}

    def on_baseline(result: Mapping[str, Any]) -> None:
        options_seen = merged(in_source, recorded_options(result))
        ex.resolve_switches(levers, options_seen, cmd.args, num_workers=num_workers, environment=environment)
        used.clear()
        for lv in levers:
            if lv.switch is not None and lv.skip_reason is None:
                used[lv.name] = lv.switch.to_dict()
        if used:
            say(
                "the script's own switches: "
                + "; ".join(f"{name} -> {' '.join(u['args'])} ({u['parser']}, seen {u['seen']})" for name, u in used.items())
            )

    def on_plan(planned: int, text: str) -> None:
        wall = float(first[0].get("wall_s") or 0.0) if first else 0.0
        startup = first[0].get("startup_s") if first else None
        took = f"the first baseline trial took {wall:.0f} s" + (
            f" (start-up {float(startup):.1f} s)" if isinstance(startup, (int, float)) else ""
        )
        if budget["s"] is None:
            sized = max(wall, 1.0) * (planned + 1) * BUDGET_SLACK
            budget["s"] = sized
            say(
                f"{took}: {text}; about {planned + 1} trials, budget {sized / 60:.1f} min "
                f"({planned + 1} x {wall:.0f} s x {BUDGET_SLACK:g}; --budget sets another)"
            )
        else:
            need = wall * (planned + 1)
            more = "" if need <= budget["s"] else "; more than the budget: the search stops when the budget ends"
            say(f"{took}: {text}; about {planned + 1} trials, {need / 60:.1f} min{more}")

    explorer = ex.Explorer(
        levers,
        trials=options.trials,
        run_trial=run_trial,
        remaining=remaining,
        say=say,
        trial_timeout_s=TRIAL_TIMEOUT_S,
        predicted=predicted,
        on_baseline=on_baseline,
        on_plan=on_plan,
        batch_multiplier=multiplier,
        findings=findings,
        combined=combined,
        guided=not options.only,
    )
    notes: list[str] = []
    interrupted = False
    try:
        explorer.run(env_ok)
    except KeyboardInterrupt:
        interrupted = True
        explorer.stopped = "interrupted (Ctrl-C)"
        explorer.best = explorer.best_so_far()
        notes.append("interrupted (Ctrl-C): the trials measured so far are kept, with the best so far")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        place.remove()
    if explorer.budget_hit:
        notes.append(f"the explore budget of {budget['s'] or 0:.0f} s ended after {explorer.done} trials")
    document = _document(
        run, cmd, options, num_workers, started_wall, explorer, findings, predicted, multiplier, budget["s"], used, guess
    )
    document["wall_s"] = round(time.monotonic() - started, 3)
    document["notes"] = notes
    place.stamp(document, [r for c in (explorer.baseline, *explorer.configs.values()) for r in c.results])
    stamp_machine(document, machine)
    write_document(path, document)
    _report(say, document, machine, explorer.stopped, interrupted)
    say(f"wrote {path}")
    if interrupted:
        raise KeyboardInterrupt
    failed = explorer.baseline.final is not None
    return VerifyOutcome(path=path, document=document, exit_code=1 if failed else 0)


def _lever_entry(
    lv: ex.ExploreLever,
    explorer: ex.Explorer,
    base: RunConfig,
    findings: Sequence[Mapping[str, Any]],
    predicted: Mapping[str, float],
    multiplier: int,
    num_workers: int,
) -> dict[str, Any]:
    """verify.json's trial entry of one lever: measured alone, skipped (why), or failed."""
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
        if in_steps:
            c.reason += "; measured with the levers it needs in the configurations of the search (explore.steps)"
    elif single is not None and single.results:
        c.results, c.final, c.reason = single.results, single.final, single.reason
    elif explorer.mode == "guided":
        c.final = "skipped"
        c.reason = (
            "not measured alone: measured in the configurations of the guided search (explore.steps)"
            if in_steps
            else "not measured: neither a finding nor a measured bottleneck predicted a gain beyond the noise "
            f"for it (--only {lv.name} measures it)"
        )
        if lv.failed:
            c.reason += f"; {lv.failed}"
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
    if lv.switch is not None:
        entry["switch"] = lv.switch.to_dict()
    if lv.multiplier:
        entry["rung_of"] = lv.lever.name  # a rung of the batch ladder
    if lv.failed and entry.get("status") == "ok":
        entry["dropped"] = lv.failed  # worked alone, failed in a combination
    return entry


def _best_entry(explorer: ex.Explorer, num_workers: int, multiplier: int) -> dict[str, Any] | None:
    best = explorer.best
    if best is None or not best.levers:
        return None
    cmp = explorer.comparison(best)
    if cmp is None:
        return None
    members = [explorer.levers[n] for n in best.levers]
    labels = [_lever_label(lv, num_workers, multiplier) for lv in members]
    changes = _changes(best.ok())
    entry = {
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
        **across_trials(best.ok()),
        "switches": [lv.switch.to_dict() for lv in members if lv.switch is not None],
        "changes": changes,
        "change": "; ".join(c["text"] for c in changes) if changes else None,
        "changes_numerics": any(lv.spec.changes_numerics for lv in members),
        "text": f"best measured configuration: {' + '.join(labels)}: {ex.speed_text(cmp, len(best.ok()))}",
    }
    if entry["changes_numerics"]:
        entry["note"] = "lower-precision math: re-check accuracy (loss curve) before keeping it"
    return entry


def _document(
    run: Path,
    cmd: RecordedCommand,
    options: VerifyOptions,
    num_workers: int,
    started_wall: float,
    explorer: ex.Explorer,
    findings: Sequence[Mapping[str, Any]],
    predicted: Mapping[str, float],
    multiplier: int,
    budget_s: float | None,
    used: Mapping[str, Mapping[str, Any]],
    guess: float | None,
) -> dict[str, Any]:
    """verify.json of an explore: the baseline, one trial entry per lever (measured alone, skipped or
    failed), the search."""
    base = RunConfig(BASELINE, (), None, results=explorer.baseline.results, final=explorer.baseline.final,
                     reason=explorer.baseline.reason)  # fmt: skip
    trials = [_lever_entry(lv, explorer, base, findings, predicted, multiplier, num_workers) for lv in explorer.levers.values()]
    document = document_head(run, cmd, options, num_workers, started_wall)
    document["settings"].update(
        order=(
            "explore, guided: rounds of the current configuration and the candidates priced highest, interleaved"
            if explorer.mode == "guided"
            else "explore: singles interleaved with the baseline, then greedy growth (baseline, best, candidates)"
        ),
        explore=True,
        budget_s=None if budget_s is None else round(budget_s, 1),
        budget_from="--budget" if options.budget_s is not None else "the first baseline trial's length",
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
                "mode": explorer.mode,
                "levers": list(explorer.levers)[: len(explorer.levers) - len(explorer.rungs)],
                "sets": [
                    {"levers": list(s.levers), "predicted_speedup": round(s.speedup, 3), "source": s.source,
                     "changes_batch": s.changes_batch}
                    for s in explorer.sets
                ],
                "switches": [dict(u) for u in used.values()],
                "script_flags": sorted({str(u["option"]) for u in used.values()}),
                "steps": explorer.steps,
                "best": _best_entry(explorer, num_workers, multiplier),
                "batch": _batch_entry(trials, explorer.levers),
                "rungs": list(explorer.rungs),
                "stopped": explorer.stopped,
                "trials_run": explorer.done,
                "estimate_s_per_trial": None if guess is None else round(guess, 1),
            },
        }
    )
    return document


def _report(
    say: Callable[[str], None], document: Mapping[str, Any], machine: Mapping[str, Any], stopped: str | None,
    interrupted: bool,
) -> None:  # fmt: skip
    """The lines the terminal gets once the search is over."""
    where = f" [measured on {machine.get('measured_text')}]" if not machine.get("same") else ""
    explore = document["explore"]
    for t in document["trials"]:
        say(f"{t['lever']}: {summary_text(t)}")
    best = explore["best"]
    if best is not None:
        so_far = "best so far (interrupted): " if interrupted else ""
        say(f"{so_far}{best['text']}{where}")
        say(f"  changes: {best['change'] or 'none recorded'}")
        if best.get("note"):
            say(f"  note: {best['note']}")
    else:
        say(f"no best configuration: {stopped}{where}")
    if explore["batch"] is not None:
        say(f"{explore['batch']['text']}{where}")
    if stopped:
        say(f"search stopped: {stopped}")
