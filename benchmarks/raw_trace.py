"""Minimal independent trace recorder (no gpuadvisor imports).

    python3 benchmarks/raw_trace.py -o trace.json.gz [--skip 10] [--warmup 2] [--active 10] [--with-stack]
                                    SCRIPT [ARGS...]

Runs SCRIPT as `__main__` (also bound as `__mp_main__`, so spawn/forkserver DataLoader workers can
unpickle classes defined in it) under torch.profiler (CPU + CUDA, record_shapes, with_flops; stacks with
`--with-stack`, as many users record them).
The profiler schedule advances on every optimizer step (global optimizer step post-hook): skip N steps,
warm up, record the active window, export the Chrome trace (gzip when the path ends in .gz), then stop
the script. Exit status: 0 when a trace was written, 1 when the script ended before the window, or the
script's own status if it failed. A window cut short (the script ended while recording) is still
exported but exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types
from typing import Any


class _WindowDone(BaseException):
    """Raised from the optimizer hook once the trace is exported; unwinds the user script."""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-o", "--output", required=True, help="trace path (.json or .json.gz)")
    parser.add_argument("--skip", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--active", type=int, default=10)
    parser.add_argument("--with-stack", action="store_true", help="record Python stacks (with_stack=True)")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args()
    if not os.path.isfile(ns.script):
        parser.error(f"no such script: {ns.script}")

    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.profiler import ProfilerActivity, profile, schedule

    out = os.path.abspath(ns.output)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    state: dict[str, Any] = {"steps": 0, "exported": False, "done": False}

    def on_ready(prof: Any) -> None:
        t0 = time.perf_counter()
        prof.export_chrome_trace(out)
        state["exported"] = True
        print(
            f"[raw_trace] wrote {out} ({os.path.getsize(out) / 1e6:.2f} MB, "
            f"export {time.perf_counter() - t0:.1f}s)",
            file=sys.stderr,
            flush=True,
        )

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    prof = profile(
        activities=activities,
        schedule=schedule(wait=ns.skip, warmup=ns.warmup, active=ns.active, repeat=1),
        on_trace_ready=on_ready,
        record_shapes=True,
        with_flops=True,
        with_stack=ns.with_stack,
    )

    def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if state["done"]:
            return
        state["steps"] += 1
        prof.step()
        if state["exported"]:
            state["done"] = True
            prof.stop()
            raise _WindowDone

    register_optimizer_step_post_hook(hook)

    script = os.path.abspath(ns.script)
    module = types.ModuleType("__main__")
    module.__dict__.update({"__file__": script, "__builtins__": __builtins__, "__spec__": None})
    sys.modules["__main__"] = module
    sys.modules["__mp_main__"] = module
    sys.argv = [script, *ns.args]
    sys.path[0] = os.path.dirname(script)
    with open(script, "rb") as f:
        code = compile(f.read(), script, "exec")

    status = 0
    prof.start()
    try:
        exec(code, module.__dict__)
    except _WindowDone:
        pass
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        if not state["done"]:
            state["done"] = True
            prof.stop()  # saves a window cut short during RECORD
    recorded = max(0, min(ns.active, state["steps"] - ns.skip - ns.warmup))
    if state["exported"] and recorded < ns.active:
        print(
            f"[raw_trace] window cut short: the script ended after {state['steps']} optimizer steps, "
            f"{recorded} of {ns.active} active steps recorded",
            file=sys.stderr,
            flush=True,
        )
        return status or 1
    if not state["exported"]:
        print(
            f"[raw_trace] no trace written: the script ended after {state['steps']} optimizer steps "
            f"(window needs {ns.skip + ns.warmup + ns.active})",
            file=sys.stderr,
            flush=True,
        )
        return status or 1
    return status


if __name__ == "__main__":
    sys.exit(main())
