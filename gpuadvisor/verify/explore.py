"""`gpuadvisor verify RUN --explore`: search for the best measured configuration of the run's levers.

The levers are the registry's (gpuadvisor/verify/levers.py: which apply, injected or set through the
script's own switch). The first trial is the baseline's: it sizes the search (its length gives the
default budget), records the script's options (its switches) and measures the first bottleneck.

**Guided** (the findings price remedy sets, or the baseline waits for data; gpuadvisor/verify/guide.py):
each round measures the configuration the search stands on (the baseline first) and the candidates
priced highest on top of it, interleaved, `trials` times: the remedy sets the replay prices, as sets
(channels_last + bf16 that GA1102/GA1103 predict together is one configuration, not two singles
behind the noise), and what the measured bottleneck calls for (the data levers once the loop waits
for data). The candidate that gains most over the current configuration beyond noise (`faster`
against its trials) becomes the configuration the next round stands on; a round without one goes
on with the next candidates. The search stops when no candidate is predicted to gain more than the
noise, or the budget ends. A predicted larger batch is measured alone after the first round, in
samples/s, with its ladder.

**Unguided** (no finding prices a lever, or `--only` names the levers to measure):

1. **Singles.** The baseline and each applicable lever alone, `trials` times, interleaved
   (B L1 L2 ... B L1 L2 ...). A lever whose trial fails is dropped with its reason; the rest go on.
   The levers a finding of the run predicts (PREDICTED_FIRST_MIN or more) get all their trials
   first, the largest predicted gain first; the others follow beside a baseline measured again. Slow
   levers (compilation: minutes of warm-up) are not measured alone unless a finding predicts them or
   no other lever is faster. A budget that ends during the singles still gives a best configuration:
   the fastest single with a `faster` verdict on the trials it has (at least 2 a side).
2. **Growth.** The best configuration starts as the single lever that measured fastest with a
   `faster` verdict. Each round measures the current best again and the best plus each candidate
   (interleaved, `trials` times; at most MAX_CANDIDATES, the levers fastest alone first), and keeps the
   candidate that gains most over the current best when that gain is beyond noise. Candidates: not
   failed, not slower than the baseline alone (median), not a second setting of a switch already in,
   applicable with the best's levers (`persistent_workers` once `num_workers` is in). The candidates
   come in phases (GROWTH_PHASES): the levers faster alone or not measurable alone; then the slow
   levers not measured alone; last the levers that measured no gain alone (within noise).

In both: levers that change the batch are measured alone, in samples/s, never joined to a combination
(a different batch is a different experiment). A configuration whose trial fails (the script rejects
a lever, the loss turns NaN/Inf, the model's output changes shape, steps are counted differently) is
reported with its reason and never kept; a lever that fails alone or as the one lever added to a
configuration is dropped from the search. Two levers of one remedy join only when they set different
parameters (`num_workers` + `prefetch_factor`), never two settings of one switch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuadvisor.verify import guide
from gpuadvisor.verify.levers import (
    ExploreLever,
    applies_with,
    build_levers,
    conflicts,
    estimate_text,
    resolve_switches,
    speed_text,
    trial_setup,
    unknown_only,
)
from gpuadvisor.verify.measure import measurement_text
from gpuadvisor.verify.stats import MIN_EFFECT, Verdict, batch_samples, compare, measured

__all__ = [
    "MAX_CANDIDATES",
    "Configuration",
    "ExploreLever",
    "Explorer",
    "applies_with",
    "build_levers",
    "conflicts",
    "estimate_text",
    "resolve_switches",
    "speed_text",
    "trial_setup",
    "unknown_only",
]

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
# What the default budget plans for after the guided search's first round: this many rounds of the
# configuration it stands on and this many candidates each (the unguided growth: its own rounds)
FOLLOW_UP_ROUNDS = 2
FOLLOW_UP_CANDIDATES = 2
OUTPUT_SHAPES_TO_COMPARE = 1  # the baseline's output shape is compared where it had one shape


EnvironmentOk = Callable[[ExploreLever, Sequence[ExploreLever]], "str | None"]


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


class Explorer:
    """Runs the search. `run_trial(levers, timeout_s)` runs one trial process of a configuration and
    returns its result; `remaining()` the seconds left of the budget (None: no budget). `findings`
    (the run's findings as JSON objects) and `combined` (findings.json's `prediction`) guide it
    (`guided`); `on_baseline(result)` is called with the first baseline trial's result (the script's
    options it recorded); `on_plan(trials, text)` once the first round is known (the default budget)."""

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
        on_plan: Callable[[int, str], None] | None = None,
        findings: Sequence[Mapping[str, Any]] | None = None,
        combined: Mapping[str, Any] | None = None,
        guided: bool = False,
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
        self.on_baseline = on_baseline
        self.on_plan = on_plan
        self.findings = list(findings or [])
        self.combined = combined
        self.guided = guided  # the analysis may guide the search (no --only)
        self.sets: list[guide.PricedSet] = []  # the lever sets the analysis prices (guided)
        self.mode = "unguided"
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
        self._why: dict[tuple[str, ...], tuple[float, str]] = {}  # a guided candidate's price and reason

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
        damage = self._damage(config, result)
        if damage is not None:
            result = {**result, "status": "failed", "reason": damage}
        config.results.append(result)
        self.longest = max(self.longest, float(result.get("wall_s") or 0.0))
        text = measurement_text(result)
        if result.get("status") != "ok":
            config.final, config.reason = str(result.get("status")), str(result.get("reason"))
            for name in config.levers if len(config.levers) == 1 else ():
                self.levers[name].failed = f"{config.final}: {config.reason}"
            refused = result.get("refused_lever")
            if isinstance(refused, str) and refused in self.levers:
                # the script refused that lever's switch: the lever fails, not the set's others
                # (guide.candidates offers the set without it)
                self.levers[refused].failed = str(result.get("reason"))
        self.say(f"{label} trial {self.done}: {config.name} ... {text}")
        return True

    def _damage(self, config: Configuration, result: Mapping[str, Any]) -> str | None:
        """Why a configuration's successful trial is still refused: it counted steps differently from
        the baseline, or it changed the shape of the model's output (beyond the batch axis for a lever
        that changes the batch)."""
        base_ok = self.baseline.ok()
        if result.get("status") != "ok" or config is self.baseline or not base_ok:
            return None
        method, base_method = result.get("step_detection"), base_ok[0].get("step_detection")
        if base_method and method != base_method:
            return f"steps were counted differently from the baseline: {method} vs {base_method}"
        base_shapes = {tuple(s) for r in base_ok for s in r.get("output_shapes") or []}
        mine = {tuple(s) for s in result.get("output_shapes") or []}
        if len(base_shapes) != OUTPUT_SHAPES_TO_COMPARE or not mine:
            return None  # no shape recorded, or one that varies from step to step (varlen batches)
        (base,) = base_shapes
        batch = self._changes_batch(config)
        for shape in mine:
            same_rank = len(shape) == len(base)
            differs = [i for i in range(len(base)) if same_rank and shape[i] != base[i]]
            if not same_rank or (differs and not (batch and len(differs) == 1)):
                return (
                    f"the model's output changed shape: {list(base)} in the baseline, {list(shape)} with "
                    f"{config.name} (a lever must not change what the model computes)"
                )
        return None

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

    def best_so_far(self) -> Configuration | None:
        """The fastest configuration measured with a `faster` verdict against the baseline (a search cut
        short by Ctrl-C or the budget: at least 2 trials a side), else the current one."""
        ranked = self._ranked([c for c in self.configs.values() if c.levers])
        current = self.best if self.best is not None and self.best.levers else None
        if ranked and (current is None or self._faster_than(ranked[0], current)):
            return ranked[0]
        return current

    def _faster_than(self, a: Configuration, b: Configuration) -> bool:
        ca, cb = self.comparison(a), self.comparison(b)
        return ca is not None and (cb is None or ca.speedup > cb.speedup)

    # ------------------------------------------------------------------ the search
    def run(self, environment_ok: EnvironmentOk) -> None:
        # the first baseline trial comes first: it sizes the search, records the script's options
        # (its switches) and measures the first bottleneck
        self.measure(self.baseline, f"singles 1/{self.trials}")
        if self.baseline.final is not None:
            self.stopped = f"the baseline failed: {self.baseline.reason}"
            return
        if self.on_baseline is not None:
            self.on_baseline(self.baseline.results[0])
        if self.guided:
            self.sets = guide.predicted_sets(self.findings, self.combined, self.levers, environment_ok)
            first = self._guided_candidates(environment_ok)
            if first or any(s.changes_batch for s in self._batch_sets()):
                self.mode = "guided"
                self._plan(len(first) + 1, self._plan_text(first))
                self._guided(environment_ok, first)
                return
        self._plan(
            1 + sum(1 for lv in self.levers.values() if lv.skip_reason is None and not lv.lever.slow),
            "no finding prices a lever set and the baseline does not wait for data: every applicable lever "
            "alone, then the best combination grows"
            if self.guided
            else "every lever named by --only alone, then the best combination grows",
        )
        self._unguided(environment_ok)

    def _plan(self, first_round: int, text: str) -> None:
        if self.on_plan is None:
            return
        follow = FOLLOW_UP_ROUNDS * (1 + FOLLOW_UP_CANDIDATES)
        batch = 2 if any(s.changes_batch for s in self._batch_sets()) else 0
        self.on_plan(self.trials * (first_round + follow + batch) - 1, text)

    def _plan_text(self, first: Sequence[guide.Candidate]) -> str:
        names = "; ".join(f"{'+'.join(c.levers)} (up to {c.price:.2f}x: {c.why})" for c in first) or "none"
        return f"round 1 measures the baseline and {len(first)} configuration(s): {names}; then what the bottleneck calls for"

    def _batch_sets(self) -> list[guide.PricedSet]:
        return [s for s in self.sets if s.changes_batch and s.speedup >= guide.threshold(None)]

    def _guided_candidates(self, environment_ok: EnvironmentOk) -> list[guide.Candidate]:
        assert self.baseline.ok()
        stands = self.best if self.best is not None else self.baseline
        here = guide.Bottleneck.of(stands.ok())
        base = guide.Bottleneck.of(self.baseline.ok())
        if here is None or base is None:
            return []
        recorded = self._recorded_ms() or base.compute_ms
        measured_configs = [
            (c.levers, b)
            for c in self.configs.values()
            if c.levers and c.final is None and not self._changes_batch(c) and (b := guide.Bottleneck.of(c.ok()))
        ]

        def skip(names: tuple[str, ...]) -> bool:
            c = self.configs.get(names)
            if c is not None and (c.results or c.final is not None):
                return True  # measured already
            # a configuration that contains one that failed would fail too
            return any(set(f.levers) <= set(names) for f in self.configs.values() if f.final is not None and f.levers)

        found = guide.candidates(
            best_levers=stands.levers,
            best=here,
            recorded_ms=recorded,
            sets=self.sets,
            measured=measured_configs,
            levers=self.levers,
            env_ok=environment_ok,
            skip=skip,
        )
        for c in found:
            self._why[c.levers] = (c.price, c.why)
        return found

    def _recorded_ms(self) -> float | None:
        """The recorded step the predicted shares are of: the typical step where the predictions were
        carried to the run's mean step (`median_step_ms`; guide reads their `typical_speedup`), else
        their `baseline_step_ms`."""
        preds = [p for p in (*(f.get("prediction") for f in self.findings), self.combined) if isinstance(p, Mapping)]
        for key in ("median_step_ms", "baseline_step_ms"):
            for pred in preds:
                value = pred.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                    return float(value)
        return None

    def _guided(self, environment_ok: EnvironmentOk, first: Sequence[guide.Candidate]) -> None:
        """The guided search (module docstring)."""
        self.best = self.baseline
        found: Sequence[guide.Candidate] = first
        batch_done = False
        number = 1
        while True:
            if not found and not batch_done:
                batch_done = True
                if not self._guided_batch():
                    return
                found = self._guided_candidates(environment_ok)
                continue
            if not found:
                here = guide.Bottleneck.of(self.best.ok())
                self.stopped = (
                    f"the predicted remaining gain is below the noise ({100 * (guide.threshold(here) - 1):.0f}%) "
                    f"on {'the baseline' if not self.best.levers else self.best.name}"
                    + (f" ({here.text()})" if here is not None else "")
                )
                break
            here = guide.Bottleneck.of(self.best.ok())
            self.say(
                f"round {number}: on {self.best.name} ({here.text() if here else 'not measured'}): "
                + "; ".join(f"{'+'.join(c.levers)} (up to {c.price:.2f}x: {c.why})" for c in found)
            )
            configs = [self.config(c.levers) for c in found]
            complete = self._round(configs, f"round {number}", skip_first=self.best is self.baseline and number == 1)
            winner = self._winner(configs)
            self._record_step(configs, winner)
            number += 1
            if winner is not None:
                self.best = winner
            if not complete:
                self.stopped = (
                    f"the baseline failed: {self.baseline.reason}"
                    if self.baseline.final is not None
                    else f"the budget ended during round {number - 1}"
                )
                break
            if number == 2 and not batch_done:
                batch_done = True
                if not self._guided_batch():
                    break
            found = self._guided_candidates(environment_ok)
        if self.best is self.baseline:
            self.best = None

    def _guided_batch(self) -> bool:
        """A larger batch the findings predict: measured alone beside the baseline, with its ladder;
        False when the budget ended."""
        batch = [self.levers[s.levers[0]] for s in self._batch_sets() if len(s.levers) == 1 and s.levers[0] in self.levers]
        batch = [lv for lv in batch if lv.skip_reason is None and not lv.failed][:1]
        if not batch:
            return True
        if not self._singles(batch, "batch", baseline_from=len(self.baseline.results)):
            self.stopped = "the budget ended while measuring a larger batch"
            return False
        if not self._ladder(batch):
            self.stopped = "the budget ended on the batch ladder"
            return False
        return True

    def _round(self, configs: Sequence[Configuration], label: str, *, skip_first: bool = False) -> bool:
        """The current best and `configs`, interleaved, `trials` times; False when the budget ended.
        `skip_first`: the best's first trial of this round is one it already has (the first baseline
        trial)."""
        assert self.best is not None
        for rnd in range(self.trials):
            for c in (self.best, *configs):
                if rnd == 0 and skip_first and c is self.best:
                    continue
                if not self.measure(c, label):
                    return False
                if self.baseline.final is not None:
                    return False
        return True

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

    def _unguided(self, environment_ok: EnvironmentOk) -> None:
        """Every applicable lever alone, then greedy growth (the module docstring's unguided search)."""
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
            out_of_budget = not self._round(candidates, f"grow {len(self.best.levers) + 1}")
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
        """The candidate that gains most over the current best, when beyond noise (of those within the
        smallest effect of it, the one with the fewest levers); drops a lever whose
        combination failed when it was the one lever added (a set that fails leaves its levers to the
        candidates that hold fewer of them)."""
        assert self.best is not None
        winners = []
        for c in candidates:
            over_best = self.comparison(c, self.best)
            if over_best is not None and over_best.verdict is Verdict.FASTER:
                winners.append((over_best.speedup, c))
            added = set(c.levers) - set(self.best.levers)
            if c.final is not None and len(added) == 1:  # failed in combination: dropped from the search
                (name,) = added
                self.levers[name].failed = f"{c.final} on top of {self.best.name}: {c.reason}"
        if not winners:
            return None
        winners.sort(key=lambda w: (-w[0], len(w[1].levers)))
        top_speedup, chosen = winners[0]
        for speedup, c in winners[1:]:
            # as fast within the smallest effect the verdicts count, with fewer levers: the simpler one
            if len(c.levers) < len(chosen.levers) and speedup * MIN_EFFECT >= top_speedup:
                chosen = c
        return chosen

    def _untried(self, lv: ExploreLever) -> bool:
        assert self.best is not None
        return not lv.failed and lv.name not in self.best.levers and lv.name not in self.tried_on_best

    def _candidates(
        self, environment_ok: EnvironmentOk, *, phase: str
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
            if c.levers in self._why:
                price, why = self._why[c.levers]
                item.update(predicted_over_best=round(price, 3), why=why)
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
