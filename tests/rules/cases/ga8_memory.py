"""GA801 near-oom and GA802 allocator-churn cases. All traces are SYNTHETIC (tests/synth.py)."""

from __future__ import annotations

from tests.rules.harness import Expect, RuleCase
from tests.synth import K_ELEMENTWISE, SyntheticTrace

GIB = 2**30


def _mem(allocated: float, reserved: float) -> dict[str, object]:
    return {
        "memory": {
            "peak_allocated_bytes": allocated * GIB,
            "peak_reserved_bytes": reserved * GIB,
            "total_bytes": 80 * GIB,
        },
        "settings": {"allow_tf32_matmul": False, "snapshot": "window_end"},
    }


def plain() -> SyntheticTrace:
    st = SyntheticTrace()
    for n in range(5):
        st.add_step(n + 1, cpu_start=n * 1000.0, cpu_dur=1000.0, gpu_dur=1000.0)
        st.add_kernel(K_ELEMENTWISE, ts=n * 1000.0 + 20.0, dur=900.0, grid=(1024, 1, 1))
    return st


def _churn(first_step_only: bool, host: bool = False) -> SyntheticTrace:
    st = plain()
    for n in range(5):
        if first_step_only and n > 0:
            continue
        t = n * 1000.0 + 300.0
        st.add_runtime("cudaHostAlloc" if host else "cudaMalloc", t, 60.0)
        st.add_runtime("cudaFreeHost" if host else "cudaFree", t + 100.0, 40.0)
    return st


def churn_every_step() -> SyntheticTrace:
    return _churn(False)


def retries_inside_ops() -> SyntheticTrace:
    """Synthetic: the caching allocator frees its cache and allocates again inside an op every step (an
    allocation that did not fit: its retry), not from host code between ops."""
    st = plain()
    for n in range(5):
        t = n * 1000.0 + 300.0
        st.add_cpu_op("aten::empty", t - 5.0, 200.0)
        st.add_runtime("cudaFree", t, 40.0)
        st.add_runtime("cudaMalloc", t + 100.0, 60.0)
    return st


def churn_warmup_only() -> SyntheticTrace:
    return _churn(True)


def pinned_every_step() -> SyntheticTrace:
    return _churn(False, host=True)


CASES = [
    RuleCase(
        "GA801-info-at-92-percent-reserved",
        "GA801",
        plain,
        environment=_mem(70, 74),
        expect=Expect(fires=True, severity="info", message_contains=("92%",)),
    ),
    RuleCase(
        "GA801-low-at-98-percent-with-fragmentation",
        "GA801",
        plain,
        environment=_mem(60, 78.5),
        expect=Expect(fires=True, severity="low", message_contains=("fragmentation",)),
    ),
    RuleCase(
        "GA801-quiet-at-50-percent", "GA801", plain, environment=_mem(35, 40), expect=Expect(fires=False)
    ),
    RuleCase(
        "GA801-not-applicable-on-raw-trace",
        "GA801",
        plain,
        expect=Expect(fires=False, status="not_applicable", detail_contains=("settings",)),
    ),
    RuleCase(
        "GA802-fires-on-malloc-free-every-step",
        "GA802",
        churn_every_step,
        expect=Expect(
            fires=True,
            min_severity="medium",
            message_contains=("cudaMalloc 1.0/step",),
            recommendation_contains=("torch.cuda.empty_cache() does: remove that call",),
            evidence_keys=("free_time_outside_ops_fraction",),
        ),
    ),
    RuleCase(
        "GA802-names-a-steady-cache-when-the-frees-are-inside-ops",
        "GA802",
        retries_inside_ops,
        expect=Expect(fires=True, recommendation_contains=("expandable_segments",)),
    ),
    RuleCase(
        "GA802-fires-on-pinned-alloc-every-step",
        "GA802",
        pinned_every_step,
        expect=Expect(fires=True, recommendation_contains=("pin_memory",)),
    ),
    RuleCase(
        "GA802-quiet-when-allocations-only-in-warmup-step",
        "GA802",
        churn_warmup_only,
        expect=Expect(fires=False),
    ),
]
