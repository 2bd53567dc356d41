from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from gpuadvisor.rules_api import Category, Finding, Location, Rule, RuleContext, Severity, Threshold
from gpuadvisor.words import after_steps

GPU_CALLS = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaMemcpyAsync",
    "cudaLaunchKernelExC",
    "cuLaunchKernelEx",
)
CUPTI_CAUSES = (
    "another CUPTI client was attached (Nsight Systems/Compute, DCGM profiling, a second profiler)",
    "torch.profiler ran without ProfilerActivity.CUDA",
    "CUPTI could not be loaded or was not permitted in this container (check the profiler warnings in gpuadvisor.log)",
    "the model ran on the CPU although CUDA was available",
)
NOTE = "GPU rules are reported not applicable rather than guessed from an incomplete record."


class CaptureIncomplete(Rule):
    """The record itself is incomplete: no GPU kernels, too few steps, the script failed, or the window was never reached.

    Why it matters
    --------------
    Every other rule reasons from the record. When CUPTI recorded no GPU kernels, the trace shows
    only CPU ops and a GPU analysis would be fiction; with one or two steps, medians are noise;
    when the script failed or stopped early, the record covers only part of a step. This rule says
    what is missing and why, so nobody mistakes an empty report for a clean one.

    How it is detected
    ------------------
    No `kernel` events although the run says CUDA was available, the manifest flags
    `no_gpu_kernels_recorded`, or the trace holds CUDA launch calls (a CUPTI failure); fewer than
    `min_steps` segmented steps or the `too_few_steps` flag; `script_failed_at_step_N`; capture
    state `not_reached`; `interrupted`, `child_killed`, `trace_not_exported`. Severity info: these
    are not performance findings. GPU rules are then not applicable (they need GPU kernels).

    How to fix
    ----------
    Give the capture enough steps and a working CUPTI. Before::

        gpuadvisor profile train.py --epochs 1 --steps 2      # ends before the window

    After::

        gpuadvisor profile train.py --epochs 1 --steps 100    # skip + warm-up + recorded steps fit
        # and make sure nothing else (nsys, ncu, DCGM profiling) holds CUPTI during the run
    """

    id = "GA001"
    name = "capture-incomplete"
    category = Category.CAPTURE
    requires = frozenset()
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_steps": Threshold(
            3, "fewer segmented steps than this cannot give a stable median step time", "steps"
        ),
    }

    def _info(self, title: str, message: str, evidence: Mapping[str, Any], recommendation: str) -> Finding:
        return self.finding(
            impact=None,
            severity=Severity.INFO,
            title=title,
            message=message,
            evidence=evidence,
            recommendation=recommendation,
            locations=[Location(function="capture")],
        )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        trace = ctx.trace
        run = ctx.run
        manifest: dict[str, Any] = run.manifest if run is not None else {}
        env: dict[str, Any] = run.environment if run is not None else {}
        degraded = run.degraded if run is not None else []
        capture = manifest.get("capture") if isinstance(manifest.get("capture"), dict) else {}
        no_trace = "trace_not_exported" in degraded or (run is not None and not run.trace_paths)

        runtime_names = trace.runtime["name"].astype(str) if len(trace.runtime) else None
        launches = int(runtime_names.isin(GPU_CALLS).sum()) if runtime_names is not None else 0
        cuda_claimed = (
            env.get("cuda_available") is True or "no_gpu_kernels_recorded" in degraded or launches > 0
        )
        if not trace.has_gpu_kernels and cuda_claimed and not no_trace:
            why = []
            if env.get("cuda_available") is True:
                why.append("the run reports CUDA available")
            if launches:
                why.append(f"the trace holds {launches} CUDA launch/copy calls")
            if "no_gpu_kernels_recorded" in degraded:
                why.append("the capture flagged no_gpu_kernels_recorded")
            yield self._info(
                "GPU kernels were not recorded",
                f"The trace has no GPU kernel events although {' and '.join(why)}. {NOTE}",
                {"kernels": 0, "cuda_launch_calls": launches, "cuda_available": env.get("cuda_available")},
                "Likely causes: " + "; ".join(CUPTI_CAUSES) + ". Re-run with nothing else profiling the GPU.",
            )
        if no_trace:
            yield self._info(
                "The trace was not exported",
                f"The run directory holds no trace file; only the capture information can be analyzed. {NOTE}",
                {"degraded": degraded},
                "See gpuadvisor.log in the run directory; re-run, and check free disk space in the output folder and /tmp.",
            )
        failed = next((d for d in degraded if d.startswith("script_failed")), None)
        if failed or manifest.get("failed_at_step") is not None:
            match = re.search(r"(\d+)$", failed or "")
            step = (
                manifest.get("failed_at_step")
                if manifest.get("failed_at_step") is not None
                else (int(match.group(1)) if match else None)
            )
            yield self._info(
                f"The script failed{f' {after_steps(step)}' if step is not None else ''}",
                f"The script raised{f' {after_steps(step)}' if step is not None else ''}, exit status {manifest.get('exit_status')}: "
                "the findings describe only what ran before.",
                {"failed_at_step": step, "exit_status": manifest.get("exit_status")},
                "Fix the script's error (its traceback was printed unchanged), then profile again.",
            )
        for flag, title in (
            ("interrupted", "The capture was interrupted"),
            ("child_killed", "The script was killed"),
        ):
            if flag in degraded:
                yield self._info(
                    title,
                    f"The run ended early ({flag}, exit status {manifest.get('exit_status')}); the record is partial.",
                    {"degraded": flag, "signal": manifest.get("signal")},
                    "Re-run to completion of the capture window; a killed child is often the OOM killer (check dmesg).",
                )
        steps = len(trace.steps) if trace.step_source not in ("whole_trace", "none") else 0
        min_steps = int(ctx.threshold("min_steps"))
        if capture.get("state") == "not_reached":
            yield self._info(
                "The capture window was never reached",
                f"The script ended after {manifest.get('steps_seen')} steps, before the profiler's recording window "
                f"(skip {capture.get('skip_steps')}, warm-up {capture.get('warmup_steps')}).",
                {"steps_seen": manifest.get("steps_seen"), "capture": capture},
                "Let the script run more steps, or lower the skipped/warm-up steps of `gpuadvisor profile`.",
            )
        elif not no_trace and "too_few_steps" in degraded:
            # The script ended before the capture window was over.
            needed = sum(int(capture.get(k) or 0) for k in ("skip_steps", "warmup_steps", "active_steps"))
            first, last = capture.get("first_recorded_step"), capture.get("last_recorded_step")
            which = (
                "its first steps were recorded instead, start-up costs (allocator growth, autotuning, "
                "compilation) included"
                if capture.get("short_run")
                else "the record ends where the script did"
            )
            span = (
                ""
                if first is None or last is None
                else f" (step {first})"
                if first == last
                else f" (steps {first} to {last})"
            )
            short = (
                f" At least {min_steps} are needed for stable per-step numbers: per-step rules are not applicable or "
                "rest on little evidence."
                if steps < min_steps
                else ""
            )
            yield self._info(
                "The script ended before the capture window was over",
                f"The script ran {manifest.get('steps_seen')} steps, fewer than the {needed or 'planned'} the capture "
                f"window needs (skip {capture.get('skip_steps')}, warm-up {capture.get('warmup_steps')}, active "
                f"{capture.get('active_steps')}); {which}: the record holds {_steps(steps)}{span}.{short}",
                {"steps": steps, "min_steps": min_steps, "steps_seen": manifest.get("steps_seen"), "capture": capture},
                "Let the script run more steps, or lower the skipped/warm-up steps of `gpuadvisor profile` "
                "(--skip-steps, --warmup-steps), so that the recorded steps are steady-state ones.",
            )
        elif not no_trace and steps < min_steps:
            source = (
                "no step markers (the whole trace is analyzed as one step)"
                if trace.step_source in ("whole_trace", "none")
                else _steps(steps)
            )
            yield self._info(
                "Too few steps were recorded",
                f"The record holds {source}; at least {min_steps} are needed for stable per-step numbers. Per-step rules "
                "are not applicable or rest on little evidence.",
                {"steps": steps, "min_steps": min_steps, "step_source": trace.step_source},
                "Record more steps (gpuadvisor profile records a window of steps after warm-up); for a raw trace, use "
                "torch.profiler.schedule and call prof.step() once per iteration so ProfilerStep#N marks each step.",
            )


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"
