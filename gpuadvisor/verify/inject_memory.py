"""Memory remedies applied inside a verify trial's process (issue 41): `torch.cuda.empty_cache()` made a
no-op (REMOVE_EMPTY_CACHE), and `torch.utils.checkpoint` running the checkpointed functions directly
(DROP_ACTIVATION_CHECKPOINTING: no recomputation, the activations kept; the trial reports the peak
memory it reached). Each records the change the first time the script calls the patched function; a
script that never calls it gets "nothing to change" (`Injections.runtime_skip_reason`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from gpuadvisor.remedies import RemedyId
from gpuadvisor.verify.injectors import injector

if TYPE_CHECKING:
    from gpuadvisor.verify.inject import Injections

__all__: list[str] = []


@injector(RemedyId.REMOVE_EMPTY_CACHE)
def _inject_no_empty_cache(inj: Injections, torch: Any) -> None:
    original = torch.cuda.empty_cache

    @functools.wraps(original)
    def empty_cache() -> None:
        inj.change(
            RemedyId.REMOVE_EMPTY_CACHE, "torch.cuda.empty_cache()", "frees the cached blocks", "no-op",
            inj.locate(), literal=False,
        )

    torch.cuda.empty_cache = empty_cache
    memory = getattr(torch.cuda, "memory", None)
    if memory is not None and getattr(memory, "empty_cache", None) is original:
        memory.empty_cache = empty_cache


@injector(RemedyId.DROP_ACTIVATION_CHECKPOINTING)
def _inject_no_checkpointing(inj: Injections, torch: Any) -> None:
    # lazy: the module is torch's; patched before the script imports names from it
    import torch.utils.checkpoint as ckpt

    def record(what: str) -> None:
        inj.change(
            RemedyId.DROP_ACTIVATION_CHECKPOINTING, what, "recomputed in the backward", "called directly",
            inj.locate(), literal=False,
        )

    def checkpoint(function: Any, *args: Any, **kwargs: Any) -> Any:
        for key in ("use_reentrant", "context_fn", "determinism_check", "debug", "preserve_rng_state"):
            kwargs.pop(key, None)
        record("torch.utils.checkpoint.checkpoint")
        return function(*args, **kwargs)

    def checkpoint_sequential(
        functions: Any, segments: Any, input: Any, use_reentrant: Any = None, **kwargs: Any
    ) -> Any:
        record("torch.utils.checkpoint.checkpoint_sequential")
        modules = list(functions.children()) if isinstance(functions, torch.nn.Sequential) else list(functions)
        for module in modules:
            input = module(input)
        return input

    checkpoint.__doc__ = ckpt.checkpoint.__doc__
    checkpoint_sequential.__doc__ = ckpt.checkpoint_sequential.__doc__
    ckpt.checkpoint = checkpoint  # type: ignore[assignment]
    ckpt.checkpoint_sequential = checkpoint_sequential
