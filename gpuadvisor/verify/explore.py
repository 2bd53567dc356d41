"""`gpuadvisor verify RUN --explore`: measure every applicable lever, then grow the best combination.

The levers are the registry's (`gpuadvisor.remedies.explore_levers`), whether or not a finding names
them. The search:

1. **Singles.** The baseline and each applicable lever alone, `trials` times, interleaved
   (B L1 L2 ... B L1 L2 ...). A lever whose trial fails is dropped with its reason; the rest go on.
   The levers a finding of the run predicts (PREDICTED_FIRST_MIN or more) get all their trials
   first, the largest predicted gain first; the others follow beside a baseline measured again (a
   budget that ends during the singles then has a verdict on the predicted levers). Slow levers (compilation: minutes of
   warm-up) are not measured alone unless a finding predicts them or no other lever is faster.
   A budget that ends during the singles still gives a best configuration: the fastest single with a
   `faster` verdict on the trials it has (at least 2 a side).
2. **Growth.** The best configuration starts as the single lever that measured fastest with a
   `faster` verdict. Each round measures the current best again and the best plus each candidate
   (interleaved, `trials` times; at most MAX_CANDIDATES, the levers fastest alone first), and keeps the
   candidate that gains most over the current best when that gain is beyond noise (`faster` against
   the best's trials). Candidates: not failed, not slower than the baseline alone (median), not a
   second setting of a switch already in, applicable with the best's levers (`persistent_workers`
   once `num_workers` is in). The candidates come in phases (GROWTH_PHASES): the levers faster alone or
   not measurable alone; then the slow levers not measured alone; last the levers that measured no gain
   alone (within noise).
   The search stops when nothing adds beyond noise, no candidate is left, or the budget cannot fit
   another trial.

Levers that change the batch (`larger_batch`) are measured alone, in samples/s, and never joined to a
combination (a different batch is a different experiment). Two levers of one remedy join only when
they set different parameters (`num_workers` + `prefetch_factor`), never two settings of one switch.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuadvisor.remedies import Lever, RemedyId, RemedySpec, explore_levers
from gpuadvisor.verify.plan import skip_reason
from gpuadvisor.verify.stats import Verdict, batch_samples, compare, measured

__all__ = ["MAX_CANDIDATES", "ExploreLever", "Explorer", "script_flags"]

MAX_CANDIDATES = 4  # combinations measured per growth round (the levers fastest alone first)
# The batch ladder: a batch lever that measured at least LADDER_SCALING x its multiplier in samples/s
# (the per-step cost still dominates: more samples per step are nearly free) is measured again at
# LADDER_STEP x that multiplier, rung after rung, while each rung is faster than the one below, up to
# LADDER_MAX_MULTIPLIER x the script's batch (an out-of-memory trial fails the rung and ends the ladder).
LADDER_SCALING = 0.5
LADDER_STEP = 4
LADDER_MAX_MULTIPLIER = 256
# The growth's phases, in order: "main" (the levers that measured faster alone, and those that could
# not be measured alone, such as persistent_workers before num_workers), "slow" (the compile levers
# not measured alone), "weak" (the levers whose trials alone measured no gain beyond noise).
GROWTH_PHASES = ("main", "slow", "weak")
# A lever whose predicted speed-up is at least this gets all its single trials before the others: a gain
# beyond the trial-to-trial noise of a few percent (a prediction of 1.00x orders nothing).
PREDICTED_FIRST_MIN = 1.05


def script_flags(script: Path | None, args: Sequence[str]) -> set[str]:
    """The timm-style switches (`--amp`, `--channels-last`) the script declares as arguments
    (`add_argument("--amp", ...)`) and the recorded command does not pass already."""
    if script is None:
        return set()
    try:
        text = script.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    out: set[str] = set()

    def declares(flag: str) -> bool:
        pattern = r"add_argument\(\s*(?:['\"][^'\"]*['\"]\s*,\s*)*['\"]" + re.escape(flag) + r"['\"]"
        return re.search(pattern, text) is not None

    for flag in ("--amp", "--channels-last"):
        if flag not in args and declares(flag):
            out.add(flag)
    # an option with a value: measured whether or not the command passes it (the last one given wins)
    for flag in BATCH_SIZE_FLAGS:
        if declares(flag):
            out.add(flag)
            break
    return out


BATCH_SIZE_FLAGS = ("--batch-size", "--batch_size")  # the spellings of the script_batch_size lever's option


def declared_at_run_time(
    levers: Sequence[ExploreLever], declared: set[str], args: Sequence[str]
) -> list[tuple[ExploreLever, str]]:
    """Make applicable the script levers whose option the script's argument parsers declared at run
    time (`declared`: their long option strings, from a trial) though its own source does not (a
    parser built in a helper module); returns the levers changed with the option each will pass."""
    changed: list[tuple[ExploreLever, str]] = []
    for lv in levers:
        flag = lv.lever.param_dict().get("script_flag")
        if not flag or lv.skip_reason is None or not lv.skip_reason.startswith("the script takes no "):
            continue
        if flag == BATCH_SIZE_FLAGS[0]:
            spelling = next((f for f in BATCH_SIZE_FLAGS if f in declared), None)
        else:
            spelling = flag if flag in declared and flag not in args else None
        if spelling is None:
            continue
        lv.skip_reason, lv.declared = None, spelling
        _one_batch_lever(levers)
        if lv.skip_reason is None:
            changed.append((lv, spelling))
    return changed


@dataclass
class ExploreLever:
    spec: RemedySpec
    lever: Lever
    skip_reason: str | None = None  # as a single (it may still join a combination that enables it)
    failed: str | None = None  # failed in a trial: dropped from the search
    declared: str | None = None  # the spelling the script declares (`--batch_size` for `--batch-size`)
    multiplier: int | None = None  # a batch lever's rung of the ladder: its own multiplier (None: the run's)

    @property
    def name(self) -> str:
        return self.lever.name if self.multiplier is None else f"{self.lever.name}@x{self.multiplier}"

    @property
    def remedy(self) -> RemedyId:
        return self.spec.id

    @property
    def script_flag(self) -> str | None:
        flag = self.lever.param_dict().get("script_flag")
        if flag and self.declared:
            return self.declared
        return str(flag) if flag else None

    @property
    def takes_value(self) -> bool:
        """A script option with a value (`--batch-size N`), not a switch."""
        return bool(self.script_flag) and self.lever.param_dict().get("multiplier") == "auto"


@dataclass
class Configuration:
    """A set of levers measured together (one lever: a single; none: the baseline)."""

    levers: tuple[str, ...]
    results: list[dict[str, Any]] = field(default_factory=list)
    final: str | None = None
    reason: str | None = None

    @property
    def name(self) -> str:
        return "+".join(self.levers) or "baseline"

    def ok(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r.get("status") == "ok"]


def conflicts(a: ExploreLever, b: ExploreLever) -> bool:
    """Two levers of one remedy that set the same parameter (two settings of one switch)."""
    if a.remedy is not b.remedy:
        return False
    if a.script_flag or b.script_flag:
        return True
    return bool(set(a.lever.param_dict()) & set(b.lever.param_dict()))


class Explorer:
    """Runs the search. `run_trial(levers, timeout_s)` runs one trial process of a configuration and
    returns its result; `remaining()` the seconds left of the budget (None: no budget)."""

    def __init__(
        self,
        levers: list[ExploreLever],
        *,
        trials: int,
        batch_multiplier: int = 4,
        run_trial: Callable[[tuple[str, ...], float], dict[str, Any]],
        remaining: Callable[[], float | None],
        say: Callable[[str], None],
        trial_timeout_s: float,
        predicted: Mapping[str, float] | None = None,
        on_baseline: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.levers = {lv.name: lv for lv in levers}
        self.batch_multiplier = batch_multiplier  # the batch levers' first multiplier (the ladder's first rung)
        self.rungs: list[str] = []  # the ladder's rungs measured (lever names, `script_batch_size@x32`)
        # lever name -> the largest speed-up a finding of the run predicts for its remedy
        self.predicted = dict(predicted or {})
        self.trials = trials
        self._run_trial = run_trial
        self.remaining = remaining
        self.say = say
        self.trial_timeout_s = trial_timeout_s
        # called with the first baseline trial's result before the levers are chosen (it may clear a
        # script lever's skip reason: the options the script's parsers declared)
        self.on_baseline = on_baseline
        self.configs: dict[tuple[str, ...], Configuration] = {}
        self.baseline = self.config(())
        self.steps: list[dict[str, Any]] = []
        self.best: Configuration | None = None
        self.tried_on_best: set[str] = set()  # levers that did not add to the current best
        self.stopped: str | None = None
        self.budget_hit = False
        self.done = 0
        self.longest = 0.0
        self.key = "step_time_ms"

    # ------------------------------------------------------------------ bookkeeping
    def config(self, levers: Iterable[str]) -> Configuration:
        order = {name: i for i, name in enumerate(self.levers)}
        key = tuple(sorted(set(levers), key=lambda n: order.get(n, len(order))))
        if key not in self.configs:
            self.configs[key] = Configuration(key)
        return self.configs[key]

    def _fits(self) -> bool:
        left = self.remaining()
        if left is None or self.done == 0:
            return True
        if self.longest > left:
            self.budget_hit = True
            return False
        return True

    def _timeout(self) -> float:
        left = self.remaining()
        return self.trial_timeout_s if left is None else max(1.0, min(self.trial_timeout_s, left))

    def measure(self, config: Configuration, label: str) -> bool:
        """One trial of `config`; False when the budget allows no more trials."""
        if config.final is not None:
            return True
        if not self._fits():
            return False
        self.done += 1
        result = self._run_trial(config.levers, self._timeout())
        base_ok = self.baseline.ok()
        method, base_method = (
            result.get("step_detection"),
            base_ok[0].get("step_detection") if base_ok else None,
        )
        if (
            result.get("status") == "ok"
            and config is not self.baseline
            and base_method
            and method != base_method
        ):
            result = {
                **result,
                "status": "failed",
                "reason": f"steps were counted differently from the baseline: {method} vs {base_method}",
            }
        config.results.append(result)
        self.longest = max(self.longest, float(result.get("wall_s") or 0.0))
        if result.get("status") == "ok":
            text = f"{float(result.get('step_time_ms') or 0):.1f} ms/step"
            if result.get("samples_per_s"):
                text += f", {float(result['samples_per_s']):.0f} samples/s"
        else:
            text = f"{result.get('status')}: {result.get('reason')}"
            config.final, config.reason = str(result.get("status")), str(result.get("reason"))
            for name in config.levers if len(config.levers) == 1 else ():
                self.levers[name].failed = f"{config.final}: {config.reason}"
        self.say(f"{label} trial {self.done}: {config.name} ... {text}")
        return True

    def comparison(self, config: Configuration, against: Configuration | None = None) -> Any:
        """stats.compare of `config` against the baseline (or `against`); None without measurements."""
        ref = against or self.baseline
        key = "samples_per_s" if self._changes_batch(config) else self.key
        if key == "samples_per_s":
            samples = batch_samples(ref.ok(), config.ok())
            if samples.unchanged is not None:
                return None  # the lever did not change the batch: nothing to compare
            base, mine = samples.baseline, samples.remedy
        else:
            base, mine = measured(ref.ok(), key), measured(config.ok(), key)
        if not base or not mine or config.final is not None:
            return None
        return compare(base, mine, higher_is_better=key == "samples_per_s")

    def batch_axis(self) -> int:
        """The axis of the counted input that holds the batch, as the first batch lever measured so
        far shows it (0 until one has: the trials count samples along axis 0)."""
        for config in self.configs.values():
            if config is not self.baseline and self._changes_batch(config) and config.ok():
                samples = batch_samples(self.baseline.ok(), config.ok())
                if samples.sizes is not None:
                    return samples.axis
        return 0

    def _changes_batch(self, config: Configuration) -> bool:
        return any(self.levers[n].spec.changes_batch for n in config.levers if n in self.levers)

    # ------------------------------------------------------------------ the search
    def _singles(self, levers: Sequence[ExploreLever], label: str, *, baseline_from: int = 0) -> bool:
        """Each lever alone, interleaved with the baseline, `trials` times; False when stopped. The
        baseline trials from index `baseline_from` on count for this group's rounds (a later group
        measures the baseline again beside its own levers)."""
        configs = [self.config((lv.name,)) for lv in levers]
        for rnd in range(self.trials):
            for c in (self.baseline, *configs):
                if len(self.baseline.results) - baseline_from > rnd and c is self.baseline:
                    continue  # measured in an earlier pass
                if not self.measure(c, f"{label} {rnd + 1}/{self.trials}"):
                    self.stopped = "the budget ended during the singles"
                    return False
                if self.baseline.final is not None:
                    self.stopped = f"the baseline failed: {self.baseline.reason}"
                    return False
        return True

    def _ladder(self, levers: Sequence[ExploreLever]) -> bool:
        """The batch ladder (LADDER_*) of each batch lever measured `faster`; False when the budget
        ended. A rung is a lever of its own (`script_batch_size@x32`), measured interleaved with the
        baseline like a single."""
        for lv in levers:
            below, m = self.config((lv.name,)), lv.multiplier or self.batch_multiplier
            while True:
                cmp = self.comparison(below)
                # judged by how much the batch grew as the input's shape says, where it says (a
                # --batch-size multiplied from a count that was not the batch grows it by another factor)
                grew = batch_samples(self.baseline.ok(), below.ok()).factor or m
                if cmp is None or cmp.verdict is not Verdict.FASTER or cmp.speedup < LADDER_SCALING * grew:
                    break
                if m >= LADDER_MAX_MULTIPLIER:
                    break
                nxt = min(m * LADDER_STEP, LADDER_MAX_MULTIPLIER)  # the last rung is the ceiling itself
                rung = dataclasses.replace(lv, multiplier=nxt, failed=None)
                self.levers[rung.name] = rung
                self.rungs.append(rung.name)
                size = f" (a {grew:.3g}x larger batch)" if grew != m else ""
                self.say(
                    f"{lv.name}: x{m}{size} gave {cmp.speedup:.2f}x the samples/s: the batch ladder measures "
                    f"x{nxt} next"
                )
                if not self._singles([rung], "batch ladder", baseline_from=len(self.baseline.results)):
                    return False
                over = self.comparison(self.config((rung.name,)), below)
                if over is None or over.verdict is not Verdict.FASTER:
                    break  # failed (out of memory, ...) or no faster than the rung below: the ladder ends
                below, m = self.config((rung.name,)), nxt
        return True

    def run(self, environment_ok: Callable[[ExploreLever, Sequence[ExploreLever]], str | None]) -> None:
        if self.on_baseline is not None:
            # the first baseline trial runs before the levers are chosen: what it saw of the script
            # (its parsers' options) can make a script lever applicable
            self.measure(self.baseline, f"singles 1/{self.trials}")
            if self.baseline.final is not None:
                self.stopped = f"the baseline failed: {self.baseline.reason}"
                return
            self.on_baseline(self.baseline.results[0])
        for lv in self.levers.values():
            if lv.skip_reason is not None:
                self.say(f"{lv.name}: not measured alone ({lv.skip_reason})")
        applicable = [lv for lv in self.levers.values() if lv.skip_reason is None]
        # predicted levers first, largest predicted gain first; the rest in the registry's order
        applicable.sort(key=lambda lv: -self.predicted.get(lv.name, 0.0))
        fast = [lv for lv in applicable if not lv.lever.slow or self.predicted.get(lv.name, 0.0) > 1.0]
        slow = [lv for lv in applicable if lv not in fast]
        # 1. singles (unpredicted slow levers wait: they join on top of the best configuration of the
        # others). The levers a finding predicts a clear gain for get all their trials first: a budget
        # that ends during the singles then has a verdict on them rather than one trial of everything.
        first = [lv for lv in fast if self.predicted.get(lv.name, 0.0) >= PREDICTED_FIRST_MIN]
        rest = [lv for lv in fast if lv not in first]
        groups = [(first, "singles (predicted)"), (rest, "singles")] if first and rest else [(fast, "singles")]
        laddered = False
        for i, (group, label) in enumerate(groups):
            if not self._singles(group, label, baseline_from=len(self.baseline.results) if i else 0):
                # the trials measured so far still count: a 'faster' verdict needs 2 trials a side
                ranked = self._ranked([self.config((lv.name,)) for lv in fast])
                self.best = ranked[0] if ranked else None
                return
            if not laddered and any(lv.spec.changes_batch for lv in group):
                # a batch lever the findings predict climbs its ladder before the other singles
                laddered = True
                if not self._ladder([lv for lv in group if lv.spec.changes_batch]):
                    ranked = self._ranked([self.config((lv.name,)) for lv in fast])
                    self.best = ranked[0] if ranked else None
                    return
        ranked = self._ranked([self.config((lv.name,)) for lv in fast])
        if not ranked and slow:
            if not self._singles(slow, "slow singles", baseline_from=len(self.baseline.results)):
                return
            ranked = self._ranked([self.config((lv.name,)) for lv in applicable])
            slow = []
        if not ranked:
            self.stopped = (
                "no lever measured faster than the baseline beyond noise"
                if self.trials >= 2
                else "one trial a side gives no verdict: the search needs --trials 2 or more"
            )
            return
        self.best = ranked[0]
        # 2. growth in phases: the levers that measured faster alone or could not be measured alone;
        # then the slow levers never measured (compilation); last, the levers that measured no gain
        # alone (within noise): an untried lever may gain a lot, one that measured ~1.00x alone rarely
        # adds much on top
        phases = [phase for phase in GROWTH_PHASES if phase != "slow" or any(self._untried(lv) for lv in slow)]
        phase, tried_a_round = 0, False
        while True:
            candidates = self._candidates(environment_ok, phase=phases[phase])
            if not candidates:
                if phase + 1 < len(phases):
                    phase += 1
                    continue
                self.stopped = (
                    "no lever adds to the best configuration beyond noise" if tried_a_round else "no lever is left to add"
                )
                return
            label = f"grow {len(self.best.levers) + 1}"
            out_of_budget = False
            for _rnd in range(self.trials):
                for c in (self.best, *candidates):
                    if not self.measure(c, label):
                        out_of_budget = True
                        break
                if out_of_budget:
                    break
            winner = self._winner(candidates)
            self._record_step(candidates, winner)
            if winner is not None:
                self.best = winner
            if out_of_budget:
                # the round's trials so far still count: a 'faster' verdict needs 2 trials a side
                self.stopped = "the budget ended while growing the combination"
                return
            if winner is not None:
                continue
            tried_a_round = True
            for c in candidates:  # tried on top of this best and did not add: not again
                for name in set(c.levers) - set(self.best.levers):
                    self.tried_on_best.add(name)

    def _winner(self, candidates: Sequence[Configuration]) -> Configuration | None:
        """The candidate that gains most over the current best, when beyond noise; drops the levers
        whose combination failed."""
        assert self.best is not None
        winners = []
        for c in candidates:
            over_best = self.comparison(c, self.best)
            if over_best is not None and over_best.verdict is Verdict.FASTER:
                winners.append((over_best.speedup, c))
            if c.final is not None:  # failed in combination: dropped from the search
                for name in set(c.levers) - set(self.best.levers):
                    self.levers[name].failed = f"{c.final} on top of {self.best.name}: {c.reason}"
        return max(winners, key=lambda w: w[0])[1] if winners else None

    def _untried(self, lv: ExploreLever) -> bool:
        assert self.best is not None
        return not lv.failed and lv.name not in self.best.levers and lv.name not in self.tried_on_best

    def _candidates(
        self, environment_ok: Callable[[ExploreLever, Sequence[ExploreLever]], str | None], *, phase: str
    ) -> list[Configuration]:
        """The best configuration plus each lever of this growth `phase` (GROWTH_PHASES) that may add
        to it: not in it, not failed, not tried on this best already, not a second setting of a switch
        in it, not slower alone (median), applicable with the best's levers; at most MAX_CANDIDATES,
        fastest alone first."""
        assert self.best is not None
        members = [self.levers[n] for n in self.best.levers]
        scored: list[tuple[float, Configuration]] = []
        for lv in self.levers.values():
            if not self._untried(lv) or lv.spec.changes_batch:
                continue
            if any(conflicts(lv, m) for m in members):
                continue
            single = self.configs.get((lv.name,))
            if single is not None and single.results:
                cmp = self.comparison(single)
                if cmp is None or cmp.speedup < 1.0:
                    continue  # failed, or slower than the baseline alone
                # a slow lever measured alone (a finding predicted it) is a candidate like any other
                weak = cmp.verdict in (Verdict.WITHIN_NOISE, Verdict.NEGLIGIBLE)
                if ("weak" if weak else "main") != phase:
                    continue
                score = cmp.speedup
            else:
                if ("slow" if lv.lever.slow else "main") != phase:
                    continue
                if lv.skip_reason is not None and environment_ok(lv, members) is not None:
                    continue  # does not apply, even with the current best's levers
                score = 1.0  # needed another lever to apply (or slow): tried after the measured ones
            scored.append((score, self.config((*self.best.levers, lv.name))))
        scored.sort(key=lambda item: -item[0])
        return [c for _, c in scored[:MAX_CANDIDATES]]

    def _ranked(self, configs: Sequence[Configuration]) -> list[Configuration]:
        scored = []
        for c in configs:
            if self._changes_batch(c):
                continue
            cmp = self.comparison(c)
            if cmp is not None and cmp.verdict is Verdict.FASTER:
                scored.append((cmp.speedup, c))
        return [c for _, c in sorted(scored, key=lambda s: -s[0])]

    def _record_step(self, candidates: Sequence[Configuration], winner: Configuration | None) -> None:
        assert self.best is not None
        entry: dict[str, Any] = {"from": list(self.best.levers), "candidates": []}
        for c in candidates:
            item: dict[str, Any] = {"levers": list(c.levers), "trials": len(c.ok())}
            if c.final is not None:
                item.update(status=c.final, reason=c.reason)
            else:
                vs_base, vs_best = self.comparison(c), self.comparison(c, self.best)
                if vs_base is not None and vs_best is not None:
                    item.update(
                        status="ok",
                        speedup=round(vs_base.speedup, 3),
                        over_best=round(vs_best.speedup, 3),
                        over_best_low=round(vs_best.low, 3),
                        over_best_high=round(vs_best.high, 3),
                        over_best_verdict=vs_best.verdict.value,
                    )
                else:
                    item.update(status="skipped", reason="no trial ran (budget)")
            entry["candidates"].append(item)
        entry["chosen"] = list(winner.levers) if winner is not None else None
        self.steps.append(entry)


def build_levers(
    environment: Mapping[str, Any],
    *,
    num_workers: int,
    env: Mapping[str, str],
    bf16_supported: bool | None,
    flags: set[str],
    only: Sequence[str] = (),
) -> list[ExploreLever]:
    """Every explore lever with why it cannot apply as a single (None: it is measured). `only`:
    lever names or remedy ids to restrict the search to."""
    wanted = {t.strip().lower() for t in only if t.strip()}
    lever_names = {lv.name for _, lv in explore_levers()}
    out: list[ExploreLever] = []
    for spec, lv in explore_levers():
        # a token names a lever; a remedy id that is not also a lever's name selects all its levers
        by_remedy = spec.id.value in wanted and spec.id.value not in lever_names
        if wanted and lv.name not in wanted and not by_remedy:
            continue
        params = lv.param_dict()
        flag = params.get("script_flag")
        declared = None
        if flag == BATCH_SIZE_FLAGS[0]:
            declared = next((f for f in BATCH_SIZE_FLAGS if f in flags), None)
            reason = None if declared else f"the script takes no {flag} argument"
        elif flag:
            reason = (
                None if flag in flags else f"the script takes no {flag} argument (or the command passes it)"
            )
        else:
            reason = skip_reason(
                spec.id,
                environment,
                num_workers=num_workers,
                env=env,
                params=params,
                bf16_supported=bf16_supported,
            )
        out.append(ExploreLever(spec, lv, reason, declared=declared))
    _one_batch_lever(out)
    return out


def _one_batch_lever(levers: Sequence[ExploreLever]) -> None:
    """The script's --batch-size is measured only where no DataLoader's batch_size can be raised:
    both are one experiment (a larger batch), and the DataLoader's is where the batch is drawn."""
    by = {lv.name: lv for lv in levers}
    loader, script = by.get("larger_batch"), by.get("script_batch_size")
    if loader is not None and script is not None and loader.skip_reason is None and script.skip_reason is None:
        script.skip_reason = "larger_batch raises the DataLoader's batch_size: the same experiment"


def unknown_only(only: Sequence[str]) -> list[str]:
    names = {lv.name for _, lv in explore_levers()} | {s.id.value for s, _ in explore_levers()}
    return [t for t in only if t.strip() and t.strip().lower() not in names]


def applies_with(
    environment: Mapping[str, Any], *, num_workers: int, env: Mapping[str, str], bf16_supported: bool | None
) -> Callable[[ExploreLever, Sequence[ExploreLever]], str | None]:
    """Whether a lever that does not apply alone applies on top of `members` (prefetch_factor or
    persistent_workers once num_workers is in the combination)."""

    def check(lv: ExploreLever, members: Sequence[ExploreLever]) -> str | None:
        if lv.script_flag:
            return lv.skip_reason
        return skip_reason(
            lv.remedy,
            environment,
            num_workers=num_workers,
            env=env,
            with_remedies=[m.remedy for m in members],
            params=lv.lever.param_dict(),
            bf16_supported=bf16_supported,
        )

    return check


def trial_setup(
    levers: Sequence[ExploreLever],
) -> tuple[tuple[str, ...], dict[str, dict[str, Any]], tuple[str, ...]]:
    """(remedies to inject, their merged lever parameters, script flags) for a configuration."""
    remedies: list[str] = []
    params: dict[str, dict[str, Any]] = {}
    flags: list[str] = []
    for lv in sorted(levers, key=lambda x: x.spec.order):
        if lv.script_flag:
            flags.append(lv.script_flag)
            continue
        r = lv.remedy.value
        if r not in remedies:
            remedies.append(r)
        params.setdefault(r, {}).update(lv.lever.param_dict())
    return tuple(remedies), params, tuple(flags)


def estimate_text(manifest: Mapping[str, Any], warmup: int, steps: int) -> tuple[float | None, str]:
    """A first guess of one trial's wall time from the recording (profile's own run: start-up, its
    steps and the profiler), before any trial ran."""
    start, end, seen = (
        manifest.get("started_unix_s"),
        manifest.get("ended_unix_s"),
        manifest.get("steps_seen"),
    )
    if (
        not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end, seen))
        or not seen
    ):
        return None, "no estimate from the recording (it does not say how long it ran)"
    assert (
        isinstance(start, (int, float)) and isinstance(end, (int, float)) and isinstance(seen, (int, float))
    )
    wall = max(0.0, float(end) - float(start))
    guess = wall * max(1.0, (warmup + steps) / float(seen))
    return guess, f"the recording ran {int(seen)} steps in {wall:.0f} s"


def speed_text(cmp: Any, trials: int) -> str:
    return f"{cmp.speedup:.2f}x ({cmp.low:.2f}-{cmp.high:.2f}, {trials} trial{'s' if trials != 1 else ''})"
