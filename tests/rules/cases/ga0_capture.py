"""SYNTHETIC rule cases for GA001 (capture-incomplete), built with tests.synth."""

from __future__ import annotations

from tests.rules.harness import Expect, RuleCase
from tests.synth import K_NVJET_BF16, SyntheticTrace


def _good(n: int = 6) -> SyntheticTrace:
    st = SyntheticTrace()
    for i in range(n):
        st.add_step(i + 1, cpu_start=i * 1000.0, cpu_dur=1000, gpu_dur=900, gpu_start=i * 1000.0 + 100)
        st.add_kernel(K_NVJET_BF16, ts=i * 1000.0 + 100, dur=800, op="aten::mm")
    return st


def _no_kernels() -> SyntheticTrace:
    st = SyntheticTrace()
    for i in range(6):
        st.add_step(i + 1, cpu_start=i * 1000.0, cpu_dur=1000)
        st.add_cpu_op("aten::mm", i * 1000.0 + 10, 50)
        st.add_runtime("cudaLaunchKernel", i * 1000.0 + 20, 5, correlation=i + 1)
    return st


def _cpu_only() -> SyntheticTrace:
    st = SyntheticTrace(device_properties=None)
    for i in range(6):
        st.add_step(i + 1, cpu_start=i * 1000.0, cpu_dur=1000)
        st.add_cpu_op("aten::mm", i * 1000.0 + 10, 500)
    return st


CASES = [
    RuleCase(
        "GA001-fires-when-cupti-recorded-no-kernels",
        "GA001",
        _no_kernels,
        expect=Expect(
            fires=True,
            severity="info",
            title_contains=("not recorded",),
            recommendation_contains=("CUPTI",),
            message_contains=("not applicable",),
        ),
    ),
    RuleCase(
        "GA001-fires-on-cuda-run-without-kernels",
        "GA001",
        _cpu_only,
        environment={"cuda_available": True},
        manifest={"degraded": ["no_gpu_kernels_recorded"]},
        expect=Expect(fires=True, title_contains=("not recorded",)),
    ),
    RuleCase("GA001-quiet-on-a-cpu-only-machine-trace", "GA001", _cpu_only, expect=Expect(fires=False)),
    RuleCase(
        "GA001-quiet-on-a-complete-capture",
        "GA001",
        _good,
        environment={"cuda_available": True},
        callsites=[],
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA001-fires-on-script-failure",
        "GA001",
        _good,
        manifest={"degraded": ["script_failed_at_step_3"], "exit_status": 1},
        expect=Expect(fires=True, title_contains=("failed after 3 completed steps (0-2)",)),
    ),
    RuleCase(
        "GA001-fires-on-too-few-steps",
        "GA001",
        lambda: _good(2),
        expect=Expect(fires=True, title_contains=("Too few steps",)),
    ),
    RuleCase(
        "GA001-fires-when-window-not-reached",
        "GA001",
        lambda: _good(2),
        manifest={"capture": {"state": "not_reached", "skip_steps": 5, "warmup_steps": 2}, "steps_seen": 3},
        expect=Expect(fires=True, title_contains=("never reached",)),
    ),
]
