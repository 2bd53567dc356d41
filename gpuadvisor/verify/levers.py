"""Explore's levers: which apply to a run, how a configuration of them is applied (injected, or set
through the script's own switch), and which may join which.

The levers are the registry's (`gpuadvisor.remedies.explore_levers`). What the run recorded rules a
lever out before any trial (`gpuadvisor.verify.plan.skip_reason`); the script's own options decide
how it is set (`gpuadvisor.verify.switches`): through its switch where it has one (timm's `--amp
--amp-dtype bfloat16`, `-j 12`; HF's `--bf16`), else injected into the trial process. The switches are
resolved twice: from the script's own source before the first trial, then from what the first
baseline trial recorded of every parser the script parsed with (a parser built in a helper module,
HfArgumentParser, click).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuadvisor.remedies import Lever, RemedyId, RemedySpec, explore_levers
from gpuadvisor.verify.plan import skip_reason
from gpuadvisor.verify.switches import SWITCHES, ScriptOption, SwitchUse, find_switch

__all__ = [
    "DATA_LEVERS",
    "ExploreLever",
    "applies_with",
    "build_levers",
    "conflicts",
    "resolve_switches",
    "trial_setup",
    "unknown_only",
]

# The levers of the input pipeline: what explore tries when the measured bottleneck is the loop's
# wait for data (gpuadvisor/verify/guide.py).
DATA_LEVERS = ("num_workers", "prefetch_factor", "persistent_workers", "dataloader_pin_memory")
# The script options `script_batch_size` knows (the reason it gives when the script has none).
BATCH_OPTIONS = "-b, --batch-size, --batch_size, --per_device_train_batch_size"
PREFETCH = 4  # the prefetch_factor lever's value (its record's parameter)


@dataclass
class ExploreLever:
    spec: RemedySpec
    lever: Lever
    skip_reason: str | None = None  # as a single (it may still join a combination that enables it)
    failed: str | None = None  # failed in a trial: dropped from the search
    multiplier: int | None = None  # a batch lever's rung of the ladder: its own multiplier (None: the run's)
    switch: SwitchUse | None = None  # set through the script's own option (None: injected)

    @property
    def name(self) -> str:
        return self.lever.name if self.multiplier is None else f"{self.lever.name}@x{self.multiplier}"

    @property
    def remedy(self) -> RemedyId:
        return self.spec.id

    @property
    def script_flag(self) -> str | None:
        """The script's option that sets this lever (None: injected)."""
        return self.switch.flag if self.switch is not None else None

    @property
    def takes_value(self) -> bool:
        """A script option whose value explore computes (`-b N`: the batch x M), not a switch."""
        return self.switch is not None and self.lever.param_dict().get("multiplier") == "auto"


def conflicts(a: ExploreLever, b: ExploreLever) -> bool:
    """Two levers of one remedy that set the same parameter (two settings of one switch)."""
    if a.remedy is not b.remedy:
        return False
    if a.script_flag and a.script_flag == b.script_flag:
        return True
    return bool(set(a.lever.param_dict()) & set(b.lever.param_dict()))


def build_levers(
    environment: Mapping[str, Any],
    *,
    num_workers: int,
    env: Mapping[str, str],
    bf16_supported: bool | None,
    options: Sequence[ScriptOption] = (),
    args: Sequence[str] = (),
    only: Sequence[str] = (),
) -> list[ExploreLever]:
    """Every explore lever with why it cannot apply as a single (None: it is measured), each set
    through the script's own switch among `options` where it has one. `only`: lever names or remedy
    ids to restrict the search to."""
    wanted = {t.strip().lower() for t in only if t.strip()}
    lever_names = {lv.name for _, lv in explore_levers()}
    out: list[ExploreLever] = []
    for spec, lv in explore_levers():
        # a token names a lever; a remedy id that is not also a lever's name selects all its levers
        by_remedy = spec.id.value in wanted and spec.id.value not in lever_names
        if wanted and lv.name not in wanted and not by_remedy:
            continue
        params = lv.param_dict()
        reason = None
        if "script_flag" not in params:
            reason = skip_reason(
                spec.id, environment, num_workers=num_workers, env=env, params=params, bf16_supported=bf16_supported
            )
        out.append(ExploreLever(spec, lv, reason))
    resolve_switches(out, options, args, num_workers=num_workers, environment=environment)
    return out


def resolve_switches(
    levers: Sequence[ExploreLever],
    options: Sequence[ScriptOption],
    args: Sequence[str],
    *,
    num_workers: int,
    environment: Mapping[str, Any],
) -> list[ExploreLever]:
    """Set each lever's switch from the script's `options` (`gpuadvisor.verify.switches`); a switch
    that is on already makes the lever skipped with that reason. Returns the levers whose switch
    changed (what the caller reports)."""
    changed = []
    for lv in levers:
        if lv.multiplier is not None or lv.lever.name not in SWITCHES:
            continue
        number = num_workers if lv.lever.name == "num_workers" else PREFETCH if lv.lever.name == "prefetch_factor" else None
        use, already = find_switch(lv.lever.name, options, args, number=number)
        script_only = "script_flag" in lv.lever.param_dict()
        before = lv.switch
        lv.switch = use
        if already is not None and lv.skip_reason is None:
            lv.skip_reason = already
        elif script_only:
            lv.skip_reason = None if use is not None else f"the script takes no batch-size option ({BATCH_OPTIONS})"
        if (before.args if before else None) != (use.args if use else None) and use is not None:
            changed.append(lv)
    _one_batch_lever(levers, environment)
    return changed


def _one_batch_lever(levers: Sequence[ExploreLever], environment: Mapping[str, Any]) -> None:
    """One batch lever per script: both raise the batch (one experiment). The script's own option
    where it sets the DataLoader's batch_size (the value it parsed to is a DataLoader's batch_size:
    the script's own way, and what depends on the batch in it, such as a learning rate scaled by it,
    follows), or where no DataLoader's batch_size can be raised; else the DataLoader's."""
    by = {lv.name: lv for lv in levers}
    loader, script = by.get("larger_batch"), by.get("script_batch_size")
    if loader is None or script is None or script.skip_reason is not None or script.switch is None:
        return
    if loader.skip_reason is not None and loader.skip_reason.startswith("the script's own "):
        loader.skip_reason = None  # decided again, on what the baseline trial parsed
    if loader.skip_reason is not None:
        return
    value = script.switch.option.value
    sizes = {d.get("batch_size") for d in environment.get("dataloaders") or [] if isinstance(d, Mapping)}
    if isinstance(value, int) and not isinstance(value, bool) and value in sizes:
        loader.skip_reason = (
            f"the script's own {script.switch.flag} sets the DataLoader's batch_size ({value}): "
            "script_batch_size raises it"
        )
    else:
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
        if "script_flag" in lv.lever.param_dict():
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
) -> tuple[tuple[str, ...], dict[str, dict[str, Any]], tuple[ExploreLever, ...]]:
    """(remedies to inject, their merged lever parameters, the levers set through the script's own
    switches) for a configuration."""
    remedies: list[str] = []
    params: dict[str, dict[str, Any]] = {}
    switched: list[ExploreLever] = []
    for lv in sorted(levers, key=lambda x: x.spec.order):
        if lv.switch is not None:
            switched.append(lv)
            continue
        r = lv.remedy.value
        if r not in remedies:
            remedies.append(r)
        params.setdefault(r, {}).update(lv.lever.param_dict())
    return tuple(remedies), params, tuple(switched)


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
