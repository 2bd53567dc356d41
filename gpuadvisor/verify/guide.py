"""Explore's guide: which configurations to measure next, priced by the analysis and by the measured
bottleneck of the configuration the search stands on.

**Sets the analysis prices.** Every remedy set a finding of the run predicts becomes a set of levers
(`predicted_sets`): each finding's own remedy (GA701 -> bf16_autocast), each group of findings fixed
together (`prediction.group_remedies`: GA1102 + GA1103 -> channels_last + bf16_autocast, one
problem, one trial) and the top findings' remedies replayed together (findings.json's `prediction`).
A remedy no lever applies (an edit of the script: host syncs, SDPA) is left out of its set, which then
keeps the largest price of what is left. A remedy with several settings of one switch (torch.compile
and its reduce-overhead mode) gives one set per setting. A set with a larger batch is measured alone,
in samples/s. A prediction carried to the run's mean step (issue 38) is read at the replay's own
speed-up on the recording's typical step (`typical_speedup`, of `median_step_ms`): on a loop whose
loader sets the pace, the mean-step speed-up of a compute remedy is near 1.00x, and what it saves
shows only once the data levers keep up (timm's ResNet-50 on an H200: more workers 2.24x, the hand fix
with bf16 and channels_last on top 3.36x). A group carried so is priced at least at its members' own
typical speed-ups composed.

A finding whose remedy frees a loader that sets the loop's pace (GA301) names the compute remedies that
pay once it keeps up (`prediction.behind_the_loader`, their speed-ups on the typical step): they form
one more set with the data remedy, priced as the product of the speed-ups (an upper bound), and a set
of their own (the product of theirs), which prices them once the data levers are in.

A lever that failed (a switch the script refused) leaves the sets that hold it: what is left of each
set is still a candidate, at the set's price (the measurement decides).

**The measured bottleneck.** Each trial measures its mean step and the time the loop waited in
DataLoader `__next__` (gpuadvisor/verify/measure.py). On the configuration B the search stands on
(the baseline first), with mean step S and data wait W:

- a set X of compute levers saves what the replay predicts for B + X beyond what it predicts for B
  (`saving_share`, in milliseconds of the recorded step: the shares of the sets of compute levers
  that cover the levers, composed as independent shares), at most what B computes (S - W);
- the data levers (num_workers, prefetch_factor, persistent_workers, pin_memory) remove the wait:
  B + data is priced S / (S - W), whether a finding names them (GA301) or the wait alone calls for
  them (the measured wait, not the replay's share of the recording);
- while the loop waits for data (W at least `DATA_BOUND_SHARE` of S), a compute set alone gains
  little (the loader sets the pace): it is priced with the data levers, S / (S - W - saved);
- a configuration measured but not kept whose own trials show the loop waiting (compute shrank, the
  loader did not follow) is tried again with the data levers: S / (its S - its W).

The next round measures B and the candidates priced highest (at most `MAX_CANDIDATES`; a part of a
set priced higher waits for a later round), each priced at least 1 + the noise (`threshold`: the
spread of B's trials, at least `MIN_NOISE`); none left is where the search stops: the predicted
remaining gain is below the noise.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuadvisor.verify.levers import DATA_LEVERS, ExploreLever, conflicts
from gpuadvisor.verify.plan import predicted_speedup

__all__ = [
    "DATA_BOUND_SHARE",
    "MAX_CANDIDATES",
    "MIN_NOISE",
    "Bottleneck",
    "Candidate",
    "PricedSet",
    "candidates",
    "predicted_sets",
    "threshold",
]

MAX_CANDIDATES = 4  # configurations measured per round besides the one the search stands on
MIN_NOISE = 0.05  # a predicted gain below 5% is not worth a round: trial-to-trial noise is of that order
DATA_BOUND_SHARE = 0.10  # the loop waits for data this share of its mean step or more: the loader sets the pace
DATA_MIN_SHARE = 0.03  # below this share of the step, a data wait prices nothing
MIN_STEP_SHARE = 0.05  # no prediction brings a step below this share of what it was

EnvironmentOk = Callable[[ExploreLever, Sequence[ExploreLever]], "str | None"]


@dataclass(frozen=True)
class PricedSet:
    """Levers the analysis predicts together: `speedup` on the recorded run (per sample for a larger
    batch), `source` says which findings."""

    levers: tuple[str, ...]
    speedup: float
    source: str
    changes_batch: bool = False

    @property
    def share(self) -> float:
        """The share of the recorded step the set saves."""
        return 0.0 if self.changes_batch else max(0.0, 1.0 - 1.0 / self.speedup)


@dataclass(frozen=True)
class Bottleneck:
    """What a configuration's trials measured: the mean step, the data wait in it, their spread."""

    mean_ms: float
    data_wait_ms: float
    spread: float  # max/min - 1 of the trials' means

    @property
    def compute_ms(self) -> float:
        return max(0.0, self.mean_ms - self.data_wait_ms)

    @property
    def data_share(self) -> float:
        return self.data_wait_ms / self.mean_ms if self.mean_ms > 0 else 0.0

    @classmethod
    def of(cls, results: Sequence[Mapping[str, Any]]) -> Bottleneck | None:
        means = [float(r["step_time_ms"]) for r in results if _pos(r.get("step_time_ms"))]
        if not means:
            return None
        waits = [float(r.get("data_wait_ms") or 0.0) for r in results if _pos(r.get("step_time_ms"))]
        return cls(statistics.median(means), statistics.median(waits), max(means) / min(means) - 1.0)

    def text(self) -> str:
        wait = f", the loop waits for data {100 * self.data_share:.0f}% of it" if self.data_share >= DATA_MIN_SHARE else ""
        return f"{self.mean_ms:.1f} ms/step{wait}"


@dataclass(frozen=True)
class Candidate:
    levers: tuple[str, ...]
    price: float  # the predicted speed-up over the configuration the search stands on
    why: str
    recorded: float = 1.0  # the analysis's own price of its set on the recording (a tie-breaker)


def _pos(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


# ---------------------------------------------------------------------------------------------- sets


def _lever_variants(remedy: str, levers: Mapping[str, ExploreLever], env_ok: EnvironmentOk) -> list[tuple[str, ...]]:
    """The lever settings that apply a remedy: one per setting of its switch (compile modes), the
    primary lever where its levers set different parameters (num_workers for dataloader_workers); a
    lever that applies only with DataLoader workers comes with num_workers."""
    mine = [lv for lv in levers.values() if lv.remedy.value == remedy and lv.multiplier is None and not lv.failed]
    ready = [lv for lv in mine if lv.skip_reason is None]
    if ready:
        first = ready[0]
        return [(lv.name,) for lv in ready if lv is first or conflicts(lv, first)]
    workers = levers.get("num_workers")
    if workers is None or workers.skip_reason is not None or workers.failed:
        return []
    for lv in mine:
        if "script_flag" not in lv.lever.param_dict() and env_ok(lv, [workers]) is None:
            return [("num_workers", lv.name)]
    return []


def _remedies_of(prediction: Mapping[str, Any] | None, key: str = "remedies") -> list[str]:
    entries = prediction.get(key) if prediction else None
    if not isinstance(entries, list):
        return []
    out = []
    for e in entries:
        name = e.get("remedy") if isinstance(e, Mapping) else e
        if isinstance(name, str) and name not in out:
            out.append(name)
    return out


def _typical(prediction: Mapping[str, Any] | None, speedup: float) -> float:
    """The replay's own speed-up on the recording's typical step where the prediction was carried to
    the run's mean step (`typical_speedup`: what the remedy gives once a loader that sets the pace keeps
    up), else the prediction's."""
    value = prediction.get("typical_speedup") if prediction is not None else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return speedup


def predicted_sets(
    findings: Sequence[Mapping[str, Any]],
    combined: Mapping[str, Any] | None,
    levers: Mapping[str, ExploreLever],
    env_ok: EnvironmentOk,
) -> list[PricedSet]:
    """The lever sets the analysis prices (module docstring), highest first; each lever set once, at
    its highest price."""
    raw: list[tuple[list[str], float, str]] = []
    own: dict[str, float] = {}  # remedy -> the largest price of a finding that names it alone
    groups: dict[str, list[str]] = {}
    for f in findings:
        pred = f.get("prediction") if isinstance(f.get("prediction"), Mapping) else None
        rule = str(f.get("rule") or "?")
        remedies = _remedies_of(pred) or ([str(f["remedy"])] if isinstance(f.get("remedy"), str) else [])
        speedup = predicted_speedup(f)
        if remedies and speedup is not None:
            speedup = _typical(pred, speedup)
            raw.append((remedies, speedup, rule))
            if len(remedies) == 1:
                own[remedies[0]] = max(own.get(remedies[0], 0.0), speedup)
        if pred and isinstance(pred.get("group"), str):
            groups.setdefault(str(pred["group"]), []).append(rule)
        behind = pred.get("behind_the_loader") if pred else None
        if remedies and speedup is not None and isinstance(behind, list):
            # GA301: the compute remedies that pay once the loader keeps up, one set with the data remedy
            # (each is worth nothing alone on a loader-bound loop), priced as the product (at most)
            extra = [
                (str(b["remedy"]), float(b["typical_speedup"]))
                for b in behind
                if isinstance(b, Mapping) and isinstance(b.get("remedy"), str) and _pos(b.get("typical_speedup"))
            ]
            if extra:
                price = speedup
                for _, x in extra:
                    price *= x
                raw.append(([*remedies, *(r for r, _ in extra)], price, f"{rule} (the loader, then its compute)"))
                # and the compute part on its own, for the search once the data levers are in
                raw.append(([r for r, _ in extra], price / speedup, f"{rule} (its compute, once the loader keeps up)"))
    for f in findings:
        pred = f.get("prediction") if isinstance(f.get("prediction"), Mapping) else None
        group, speedup = (pred.get("group"), pred.get("group_speedup")) if pred else (None, None)
        members = _remedies_of(pred, "group_remedies")
        if isinstance(group, str) and isinstance(speedup, (int, float)) and _pos(speedup) and members:
            price = float(speedup)
            if pred is not None and _pos(pred.get("typical_speedup")):
                # carried to the run's mean step, where a loader that sets the pace hides what the group
                # saves: its members' own typical speed-ups, composed as independent shares, at least
                typical = 1.0
                for r in members:
                    typical *= own.get(r, 1.0)
                price = max(price, typical)
            who = " + ".join(dict.fromkeys(groups.get(group, [])))
            raw.append((members, price, f"{who} ({group.replace('_', ' ')}: one problem)"))
    top = _remedies_of(combined)
    if combined and top and _pos(combined.get("speedup")):
        rules = combined.get("rules")
        which = " + ".join(str(r) for r in rules) if isinstance(rules, list) else ""
        price = _typical(combined, float(combined["speedup"]))
        raw.append((top, price, f"the top findings together ({which})" if which else "the top findings together"))

    best: dict[tuple[str, ...], PricedSet] = {}
    order = {name: i for i, name in enumerate(levers)}
    for remedies, speedup, source in raw:
        batch = [r for r in remedies if r == "larger_batch"]
        rest = [r for r in remedies if r != "larger_batch"]
        for chosen, is_batch in ((rest, False), (batch if not rest else [], True)):
            if not chosen:
                continue
            variants: list[tuple[str, ...]] = [()]
            kept: list[str] = []
            for r in chosen:
                options = _lever_variants(r, levers, env_ok)
                if options:
                    kept.append(r)
                    variants = [(*v, *o) for v in variants for o in options]
            if not kept:
                continue
            price = speedup
            if len(kept) < len(remedies):  # an edit of the script is part of the prediction
                price = max((own.get(r, 0.0) for r in kept), default=0.0)
                if len(kept) == 1 and len(chosen) == 1 and len(remedies) == 1:
                    price = speedup
            if price <= 1.0:
                continue
            for v in variants:
                key = tuple(sorted(set(v), key=lambda n: order.get(n, len(order))))
                if key not in best or best[key].speedup < price:
                    best[key] = PricedSet(key, price, source, changes_batch=is_batch)
    return sorted(best.values(), key=lambda s: (-s.speedup, -len(s.levers), s.levers))


# ---------------------------------------------------------------------------------------------- pricing


def saving_share(levers: Iterable[str], sets: Sequence[PricedSet]) -> float:
    """The share of the recorded step the analysis predicts `levers` save together in compute: the
    priced sets of compute levers that cover them (largest share first, each lever counted once), as
    independent shares. What the data levers save is the measured wait, not the replay's share."""
    left = set(levers) - set(DATA_LEVERS)
    kept = 1.0
    compute_sets = (s for s in sets if not s.changes_batch and not set(s.levers) & set(DATA_LEVERS))
    for s in sorted(compute_sets, key=lambda s: -s.share):
        if s.levers and set(s.levers) <= left:
            kept *= 1.0 - s.share
            left -= set(s.levers)
    return 1.0 - kept


def _without_failed(sets: Sequence[PricedSet], levers: Mapping[str, ExploreLever]) -> list[PricedSet]:
    """`sets`, each without the levers that failed (a switch the script refused): what is left of a
    set is still worth its trial, at the set's price (the measurement decides); a set left empty, or
    equal to another set, goes."""
    out: list[PricedSet] = []
    seen: set[tuple[str, ...]] = set()
    for s in sets:
        gone = [n for n in s.levers if n in levers and levers[n].failed]
        kept = tuple(n for n in s.levers if n not in gone)
        if not kept or kept in seen:
            continue
        seen.add(kept)
        if gone:
            s = dataclasses.replace(s, levers=kept, source=f"{s.source}, without {'+'.join(gone)}: it failed")
        out.append(s)
    return out


def threshold(best: Bottleneck | None) -> float:
    """A candidate is measured when its predicted gain is at least this (1 + the noise)."""
    return 1.0 + max(MIN_NOISE, best.spread if best is not None else 0.0)


def candidates(
    *,
    best_levers: tuple[str, ...],
    best: Bottleneck,
    recorded_ms: float,
    sets: Sequence[PricedSet],
    measured: Sequence[tuple[tuple[str, ...], Bottleneck]],
    levers: Mapping[str, ExploreLever],
    env_ok: EnvironmentOk,
    skip: Callable[[tuple[str, ...]], bool],
) -> list[Candidate]:
    """The configurations to measure on top of `best_levers` (module docstring), highest predicted
    gain first, at most MAX_CANDIDATES, each priced at least `threshold(best)`. `recorded_ms`: the
    recorded step the predicted shares are of (ms); `measured`: other configurations measured, with
    their bottleneck; `skip(levers)`: configurations already measured, or that cannot run."""
    order = {name: i for i, name in enumerate(levers)}
    members = [levers[n] for n in best_levers if n in levers]

    def key(names: Iterable[str]) -> tuple[str, ...]:
        return tuple(sorted(set(names), key=lambda n: order.get(n, len(order))))

    def usable(names: tuple[str, ...]) -> bool:
        new = [levers[n] for n in names if n not in best_levers and n in levers]
        if not new or any(lv.failed for lv in new):
            return False
        for i, lv in enumerate(new):
            if any(conflicts(lv, m) for m in (*members, *new[:i])):
                return False
            if lv.skip_reason is not None and env_ok(lv, [*members, *new]) is not None:
                return False
        return not skip(names)

    workers = [levers["num_workers"]] if "num_workers" in levers else []
    data = key(
        lv.name
        for lv in levers.values()
        if lv.name in DATA_LEVERS
        and lv.name not in best_levers
        and not lv.failed
        and lv.multiplier is None
        and (lv.skip_reason is None or env_ok(lv, [*members, *workers]) is None)
    )
    data_sets = [d for d in (data, ("num_workers",) if "num_workers" in data else ()) if d]
    bound = best.data_share >= DATA_BOUND_SHARE and bool(data_sets)
    floor = MIN_STEP_SHARE * best.mean_ms
    have = saving_share(best_levers, sets)
    out: dict[tuple[str, ...], Candidate] = {}

    def offer(names: Iterable[str], new_step: float, why: str, recorded: float = 1.0) -> None:
        k = key((*best_levers, *names))
        price = best.mean_ms / max(new_step, floor)
        if usable(k) and (k not in out or out[k].price < price):
            out[k] = Candidate(k, price, why, recorded)

    wait_text = f"the loop waits for data {100 * best.data_share:.0f}% of the step"
    for s in _without_failed(sets, levers):
        if s.changes_batch or set(s.levers) <= set(best_levers):
            continue
        what = f"predicted {s.speedup:.2f}x on the recording ({s.source})"
        saved = min((saving_share((*best_levers, *s.levers), sets) - have) * recorded_ms, 0.95 * best.compute_ms)
        data_part = set(s.levers) & set(DATA_LEVERS)
        if data_part:
            # a data lever of a set removes the measured wait (the replay priced it on the recording)
            offer(s.levers, best.compute_ms - max(saved, 0.0), f"{what}: {wait_text}", s.speedup)
            continue
        if saved <= 0:
            continue
        if bound:
            for d in data_sets:
                offer((*s.levers, *d), best.compute_ms - saved, f"{what}, with the data levers: {wait_text}", s.speedup)
        else:
            offer(s.levers, best.mean_ms - saved, what, s.speedup)
    if best.data_share >= DATA_MIN_SHARE:
        for d in data_sets:
            offer(d, best.compute_ms, wait_text)
    for names, other in measured:
        if set(names) <= set(best_levers) or other.data_share < DATA_BOUND_SHARE:
            continue
        for d in data_sets:
            offer((*names, *d), other.compute_ms, f"{'+'.join(names)} measured {other.text()}: with the data levers")
    bar = threshold(best)
    # highest price first; on a tie (prices capped at what the configuration computes) the set the
    # analysis prices higher, then the larger set (measured as one)
    ranked = sorted(
        (c for c in out.values() if c.price >= bar),
        key=lambda c: (-round(c.price, 3), -c.recorded, -len(c.levers), c.levers),
    )
    chosen: list[Candidate] = []
    for c in ranked:
        # a part of a set priced higher waits for the next round: the set is one trial, its parts
        # are what is left if it fails or gains nothing
        if any(set(c.levers) < set(k.levers) for k in chosen):
            continue
        chosen.append(c)
    return chosen[:MAX_CANDIDATES]
