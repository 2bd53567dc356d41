"""Predictions by remedy id: the remedy vocabulary of gpuadvisor.remedies mapped to transformations
of the replay program (gpuadvisor.stepmodel.transforms), with their parameters.

    pred = predict(model, RemedyId.REMOVE_HOST_SYNCS, kinds=("scalar_read",))
    pred.recovered_fraction   # the finding's impact
    both = predict_combined(model, [(RemedyId.PREFETCH_COPIES, {}), (RemedyId.UINT8_INPUTS, {...})])

Parameters are plain values (hashable after `_freeze`) so predictions are cached per model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuadvisor.model import prediction_base, prediction_step
from gpuadvisor.remedies import REMEDIES, NotReplayed, RemedyId, apply_order
from gpuadvisor.stepmodel import build as b
from gpuadvisor.stepmodel import kernelwork as kw
from gpuadvisor.stepmodel import transforms as t
from gpuadvisor.stepmodel.model import Prediction
from gpuadvisor.stepmodel.periodic import run_step_after
from gpuadvisor.stepmodel.recompute import drop_recompute
from gpuadvisor.stepmodel.saves import kept_per_step_ms
from gpuadvisor.words import change, of_base

if TYPE_CHECKING:
    from gpuadvisor.stepmodel.model import StepModel
    from gpuadvisor.stepmodel.replay import Program

# copies smaller than this are latency-bound: pinning or prefetching them gains little (GA101/GA102's
# `min_copy_bytes` default)
DEFAULT_MIN_COPY_BYTES = 64 * 1024


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_freeze(v) for v in value]
        return tuple(sorted(items, key=repr)) if isinstance(value, (set, frozenset)) else tuple(items)
    return value


Transform = Callable[["StepModel", "Program", dict[str, Any]], "Program"]

# The replay transformation of each remedy whose record says `Replay` (gpuadvisor.remedies); the
# registry test checks that the two agree.
TRANSFORMS: dict[RemedyId, Transform] = {}


def transform(*remedies: RemedyId) -> Callable[[Transform], Transform]:
    def register(fn: Transform) -> Transform:
        for r in remedies:
            if r in TRANSFORMS:
                raise ValueError(f"two replay transformations for {r.value}")
            TRANSFORMS[r] = fn
        return fn

    return register


@transform(RemedyId.REMOVE_HOST_SYNCS)
def _remove_host_syncs(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    kinds = tuple(p.get("kinds", (b.SCALAR_READ, b.EXPLICIT)))
    if b.SCALAR_READ in kinds:
        program = t.remove_reads(model, program)
    others = [k for k in kinds if k != b.SCALAR_READ]
    return t.remove_waits(model, program, others) if others else program


@transform(RemedyId.STATIC_SHAPES)
def _static_shapes(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return t.remove_waits(model, program, (b.DATA_DEPENDENT,))


@transform(RemedyId.PINNED_ASYNC_COPIES, RemedyId.DATALOADER_PIN_MEMORY)
def _pinned_async_copies(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    mask = t.htod_copy_mask(
        model, program, pageable_only=True, min_bytes=p.get("min_bytes", DEFAULT_MIN_COPY_BYTES)
    )
    return t.pinned_async_copies(model, program, mask)


@transform(RemedyId.PREFETCH_COPIES)
def _prefetch_copies(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    mask = t.htod_copy_mask(
        model, program, pageable_only=False, min_bytes=p.get("min_bytes", DEFAULT_MIN_COPY_BYTES)
    )
    return t.prefetch_copies(model, program, mask)


@transform(RemedyId.UINT8_INPUTS)
def _uint8_inputs(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    rows = set(p.get("rows", ()))
    mask = np.array([int(x) in rows for x in program.op_row.tolist()], dtype=bool)
    return t.narrow_copies(program, mask, float(p.get("factor", 0.25)))


@transform(RemedyId.DATALOADER_WORKERS)
def _dataloader_workers(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    if p.get("loop_preparation"):
        mask = t.loop_preparation_mask(model, program)
        return t.loop_preparation_to_workers(model, program, int(p.get("workers", 8)), mask)
    return t.faster_data(model, program, int(p.get("workers", 8)), int(p.get("current_workers", 0)))


@transform(RemedyId.LARGER_BATCH)
def _larger_batch(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return t.larger_batch(model, program, float(p.get("multiplier", 2.0)))


@transform(RemedyId.CUDA_GRAPHS)
def _cuda_graphs(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    # input_copies=False: the launch cost alone, without the graphs' input copies
    return t.cuda_graphs(model, program, input_copies=bool(p.get("input_copies", True)))


@transform(RemedyId.TORCH_COMPILE)
def _torch_compile(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    if p.get("mode") == "default":  # fusion of hand-written elementwise chains only (GA1106)
        return kw.fuse_memory_chains(model, program)
    inputs = bool(p.get("input_copies", True))
    if p.get("fusion", True):
        return t.torch_compile(model, program, input_copies=inputs)
    return t.cuda_graphs(model, program, input_copies=inputs)


@transform(RemedyId.FUSED_OPTIMIZER)
def _fused_optimizer(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return t.fused_optimizer(model, program, bool(p.get("per_tensor", True)), p.get("param_tensors"))


@transform(RemedyId.FIX_KERNEL_GRID)
def _fix_kernel_grid(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return kw.fix_grids(model, program, set(p.get("kernels", ())))


@transform(RemedyId.DROP_ACTIVATION_CHECKPOINTING)
def _drop_activation_checkpointing(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return drop_recompute(model, program, float(p.get("fraction", 1.0)))


@transform(RemedyId.BF16_AUTOCAST)
def _bf16_autocast(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return kw.lower_precision(model, program, "bf16")


@transform(RemedyId.TF32)
def _tf32(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return kw.lower_precision(model, program, "tf32")


@transform(RemedyId.EXPANDABLE_SEGMENTS, RemedyId.REMOVE_EMPTY_CACHE)
def _expandable_segments(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return kw.no_allocator_calls(model, program)


@transform(RemedyId.SDPA)
def _sdpa(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return kw.sdpa(model, program)


@transform(RemedyId.CHANNELS_LAST)
def _channels_last(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return kw.channels_last(model, program)


@transform(RemedyId.PAD_GEMM_SHAPES)
def _pad_gemm_shapes(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return kw.pad_gemm_shapes(model, program)


@transform(RemedyId.FUSED_CROSS_ENTROPY)
def _fused_cross_entropy(model: StepModel, program: Program, p: dict[str, Any]) -> Program:
    return kw.fused_cross_entropy(model, program)


def apply(model: StepModel, program: Program, remedy: RemedyId | str, params: Mapping[str, Any]) -> Program:
    """Apply one remedy's transformation to `program` (a copy)."""
    r = RemedyId(remedy)
    fn = TRANSFORMS.get(r)
    if fn is None:
        spec = REMEDIES[r]
        why = spec.replay.reason if isinstance(spec.replay, NotReplayed) else "not registered"
        raise ValueError(f"no replay transformation for remedy {r.value!r} ({why})")
    return fn(model, program, dict(params))


def _jsonable_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters as JSON values (tuples become lists, sets sorted lists)."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, (set, frozenset)):
            out[k] = sorted(v, key=repr)
        elif isinstance(v, tuple):
            out[k] = list(v)
        else:
            out[k] = v
    return out


# Remedies of costs between steps (issue 27): the cost each removes, priced from the run's timed steps
# (gpuadvisor.stepmodel.periodic), not by a transformation of the analyzed steps.
TIMED_STEP_COSTS: Mapping[RemedyId, str] = {
    RemedyId.PERSISTENT_WORKERS: "epoch_restart",
    RemedyId.EVALUATE_LESS_OFTEN: "evaluation",
    RemedyId.ASYNC_CHECKPOINT: "checkpoint",
}


def _workers(items: Sequence[tuple[RemedyId, Mapping[str, Any]]]) -> tuple[int, int] | None:
    """(workers now, workers after) of a DataLoader-workers remedy among `items` that adds worker
    processes (the loader's pace scales with them on the run's mean step), else None."""
    for r, p in items:
        if r is RemedyId.DATALOADER_WORKERS and not p.get("loop_preparation"):
            return int(p.get("current_workers", 0)), int(p.get("workers", 8))
    return None


def _with_timed_costs(
    model: StepModel,
    timed: Sequence[tuple[RemedyId, dict[str, Any]]],
    replayed: Prediction | None,
    name: str,
    remedies: tuple[tuple[str, Mapping[str, Any]], ...],
    workers: tuple[int, int] | None = None,
) -> Prediction:
    """Remedies of costs between steps, alone or with replayed ones (`replayed`: on the replayed step,
    not carried to the run): the run's mean step with the typical step scaled by the replayed remedies'
    ratio and the removable part of each cost they remove taken away (basis `timed_steps`,
    gpuadvisor.stepmodel.periodic.run_step_after)."""
    timing = model.run_timing
    m = replayed.batch_multiplier if replayed is not None else 1.0
    if timing is None:
        if replayed is not None:
            return replayed
        base = model.baseline_step_ms
        return Prediction(
            remedy=name, baseline_step_ms=base, predicted_step_ms=base, speedup=1.0, recovered_fraction=0.0,
            notes=("the run's steps were not timed: no cost between steps to remove",), remedies=remedies,
            basis="timed_steps",
        )  # fmt: skip
    costs = [c for r, _ in timed if (c := timing.cost(TIMED_STEP_COSTS[r])) is not None]
    ratio = (
        replayed.predicted_step_ms / replayed.baseline_step_ms
        if replayed is not None and replayed.baseline_step_ms > 0
        else 1.0
    )
    base = timing.mean_step_ms
    new = run_step_after(timing, ratio=ratio, batch_multiplier=m, workers=workers, removed=costs)
    # a save in the background keeps its copy to pinned memory (and a wait for a long write) on the loop
    new += sum(kept_per_step_ms(model, c) for r, _ in timed if r is RemedyId.ASYNC_CHECKPOINT
               if (c := timing.cost(TIMED_STEP_COSTS[r])) is not None)
    new = max(new, 1e-9)
    per_sample = new / base / m if base > 0 else 1.0
    notes = [f"{r.value}: no such cost was timed in this run" for r, _ in timed if timing.cost(TIMED_STEP_COSTS[r]) is None]
    notes.append(
        f"priced from the {timing.steps_observed} steps the capture timed (typical step "
        f"{timing.typical_step_ms:.2f} ms, mean step with the costs between steps amortized {base:.2f} ms)"
    )
    return Prediction(
        remedy=name,
        baseline_step_ms=base,
        predicted_step_ms=new,
        speedup=1.0 / per_sample if per_sample > 0 else float("inf"),
        recovered_fraction=max(0.0, min(1.0, 1.0 - per_sample)),
        batch_multiplier=m,
        notes=tuple(notes) + (replayed.notes if replayed is not None else ()),
        remedies=remedies,
        basis="timed_steps",
    )


def predict(model: StepModel, remedy: RemedyId | str, **params: Any) -> Prediction:
    """What `remedy` with `params` would gain (see gpuadvisor.stepmodel.model.Prediction)."""
    r = RemedyId(remedy)
    if r in TIMED_STEP_COSTS:
        return _with_timed_costs(model, [(r, dict(params))], None, r.value, ((r.value, _jsonable_params(params)),))
    m = float(params.get("multiplier", 1.0)) if r is RemedyId.LARGER_BATCH else 1.0
    return model.predict(
        r.value,
        lambda mdl, prog: apply(mdl, prog, r, params),
        key=(_freeze(params),),
        batch_multiplier=m,
        remedies=((r.value, _jsonable_params(params)),),
        workers=_workers([(r, params)]),
    )


# The order in which combined remedies transform the program: the records' `order` (gpuadvisor.remedies).
APPLY_ORDER: tuple[RemedyId, ...] = tuple(sorted(TRANSFORMS, key=apply_order))


def predict_combined(
    model: StepModel, remedies: Sequence[tuple[RemedyId | str, Mapping[str, Any]]]
) -> Prediction:
    """Several remedies applied together, in `APPLY_ORDER` whatever the order given (a CUDA graph
    can only form once the waits that break it are gone; a larger batch scales what is left)."""
    every = sorted(
        ((RemedyId(r), dict(p)) for r, p in remedies),
        key=lambda item: apply_order(item[0]),
    )
    timed = [(r, p) for r, p in every if r in TIMED_STEP_COSTS]
    items = [(r, p) for r, p in every if r not in TIMED_STEP_COSTS]
    if timed:
        replayed = _replay_combined(model, items, run=False) if items else None
        return _with_timed_costs(
            model,
            timed,
            replayed,
            "+".join(r.value for r, _ in every),
            tuple((r.value, _jsonable_params(p)) for r, p in every),
            workers=_workers(items),
        )
    return _replay_combined(model, items)


def _replay_combined(
    model: StepModel, items: Sequence[tuple[RemedyId, dict[str, Any]]], *, run: bool = True
) -> Prediction:
    """Replayed remedies applied together in `APPLY_ORDER` (`items` sorted so)."""
    m = 1.0
    for r, p in items:
        if r is RemedyId.LARGER_BATCH:
            m *= float(p.get("multiplier", 1.0))

    def transform(mdl: StepModel, prog: Program) -> Program:
        for r, p in items:
            prog = apply(mdl, prog, r, p)
        return prog

    return model.predict(
        "+".join(r.value for r, _ in items),
        transform,
        key=tuple((r.value, _freeze(p)) for r, p in items),
        batch_multiplier=m,
        remedies=tuple((r.value, _jsonable_params(p)) for r, p in items),
        workers=_workers(items),
        run=run,
    )


def remedy_keys(remedies: Iterable[tuple[RemedyId | str, Mapping[str, Any]]]) -> tuple[Any, ...]:
    return tuple((RemedyId(r).value, _freeze(p)) for r, p in remedies)


def combine_findings(
    model: StepModel, findings: Iterable[Any], *, min_rank: int = 2
) -> tuple[Prediction | None, list[str]]:
    """The findings' remedies (those at or above `min_rank` severity: 2 = medium) replayed together:
    the predicted step when the top fixes are applied at once, at the same batch size (a larger batch
    changes what a step is: it is reported on its own finding). Returns (prediction, rule ids) or
    (None, []) when no replayed remedy qualifies. Findings without a replayed prediction (NVML advice,
    multi-rank) are left out."""
    seen: set[Any] = set()
    items: list[tuple[RemedyId, dict[str, Any]]] = []
    rules: list[str] = []
    for f in findings:
        pred = getattr(f, "prediction", None)
        if not pred or f.severity.rank < min_rank or not isinstance(pred.get("remedies"), list):
            continue
        if pred.get("basis", "replay") != "replay":
            continue  # a cost between steps (timed steps), not a transformation of the analyzed steps
        added = False
        for entry in pred["remedies"]:
            try:
                r = RemedyId(entry.get("remedy"))
            except ValueError:
                continue
            if r is RemedyId.LARGER_BATCH:
                continue
            params = dict(entry.get("params") or {})
            key = (r.value, _freeze(params))
            if key in seen:
                continue
            seen.add(key)
            items.append((r, params))
            added = True
        if added:
            rules.append(f.rule)
    if not items:
        return None, []
    return predict_combined(model, items), rules


# Categories whose findings act on the same time: a per-tensor optimizer and launch-bound
# forward/backward are both launch overhead, fixed together (GA501 + GA502); the kernel_efficiency
# remedies act on the same kernels (channels_last and bf16 on a conv net's convolutions and transposes,
# SDPA and bf16 on attention) (GA1101-GA1103). The copy rules (GA101-GA103) group themselves
# (gpuadvisor/rulekit/transfers.py).
GROUPED_CATEGORIES: tuple[str, ...] = ("launch_overhead", "kernel_efficiency")
_GROUP_WHAT: dict[str, str] = {  # what the group's findings act on (`group_sentence`)
    "launch_overhead": "host launch time",
    "kernel_efficiency": "GPU kernels",
}


def larger_batch(model: StepModel, max_multiplier: float, min_marginal_gain: float) -> Prediction | None:
    """The replay of the batch multiplied by the smallest power of two (2, 4, ... up to `max_multiplier`)
    after which doubling again gains less than `min_marginal_gain` per sample; None when not even 2x is
    allowed."""
    chosen: Prediction | None = None
    multiplier = 2.0
    while multiplier <= max_multiplier:
        pred = predict(model, RemedyId.LARGER_BATCH, multiplier=multiplier)
        if chosen is not None and 1.0 - chosen.speedup / pred.speedup < min_marginal_gain:
            break
        chosen = pred
        multiplier *= 2.0
    return chosen


def group_fields(name: str, combined: Prediction) -> dict[str, Any]:
    """The keys a grouped finding's prediction carries beside its own (the one definition: the copy
    rules' group and `group_findings` write these): the group, its remedies and their combined replay."""
    return {
        "group": name,
        "group_remedies": combined.remedy.split("+"),
        "group_speedup": round(combined.speedup, 4),
        "group_recovered_fraction": round(combined.recovered_fraction, 4),
        "group_predicted_step_ms": round(combined.predicted_step_ms, 4),
    }


def group_sentence(members: str, time: str, combined: Prediction) -> str:
    """The sentence a grouped finding's message ends with: `members` (who) act on the same `time`,
    their fixes together are predicted at ..., their impacts do not add up."""
    step = prediction_step(combined.to_dict())
    return (
        f" {members} act on the same {time}: their fixes together are predicted at "
        f"{change(combined.baseline_step_ms, combined.predicted_step_ms, 'ms')} per {step.value} "
        f"({100 * combined.recovered_fraction:.0f}% {of_base(prediction_base(combined.to_dict()))}, "
        f"{combined.speedup:.2f}x); their impacts do not add up."
    )


def group_findings(model: StepModel, findings: list[Any]) -> list[Any]:
    """Findings of one grouped category with replayed remedies share one combined prediction.

    Each finding keeps its own prediction and gets `group`, `group_remedies`, `group_speedup`,
    `group_recovered_fraction` and `group_predicted_step_ms` beside it (as the copy rules do), and a
    sentence saying that the impacts do not add up. Findings rank by their group's combined impact
    (gpuadvisor.model.sort_findings): fixing the problem means applying its remedies together."""
    by_group: dict[str, list[int]] = {}
    for i, f in enumerate(findings):
        pred = getattr(f, "prediction", None)
        category = getattr(getattr(f, "category", None), "value", None)
        if category not in GROUPED_CATEGORIES or not pred or "group" in pred:
            continue
        if not isinstance(pred.get("remedies"), list):
            continue
        by_group.setdefault(str(category), []).append(i)
    out = list(findings)
    for name, idx in by_group.items():
        if len(idx) < 2:
            continue
        members = [out[i] for i in idx]
        combined, rules = combine_findings(model, members, min_rank=0)
        if combined is None or len(rules) < 2:
            continue
        sentence = group_sentence(" and ".join(rules), _GROUP_WHAT.get(name, "time"), combined)
        for i in idx:
            f = out[i]
            pred = {**f.prediction, **group_fields(name, combined)}
            out[i] = replace(f, prediction=pred, group=f.group or name, message=f.message + sentence)
    return out
