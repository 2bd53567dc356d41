"""GA901 clocks-throttled and GA902 pcie-link-degraded cases. Traces and NVML samples are SYNTHETIC."""

from __future__ import annotations

from typing import Any

from tests.rules.harness import Expect, RuleCase
from tests.synth import K_ELEMENTWISE, SyntheticTrace


def busy_trace() -> SyntheticTrace:
    st = SyntheticTrace()
    for n in range(5):
        st.add_step(n + 1, cpu_start=n * 1000.0, cpu_dur=1000.0, gpu_dur=1000.0)
        st.add_kernel(K_ELEMENTWISE, ts=n * 1000.0, dur=900.0, grid=(1024, 1, 1))
        st.add_copy("HtoD", "Pinned", nbytes=8 << 20, ts=n * 1000.0 + 900.0, dur=100.0)
    return st


def _rows(n: int, **over: Any) -> list[dict[str, Any]]:
    base = {
        "gpu_index": 0,
        "gpu_uuid": "GPU-synthetic",
        "util_gpu_pct": 95,
        "util_mem_pct": 40,
        "mem_used_bytes": 1,
        "mem_total_bytes": 2,
        "power_w": 690,
        "power_limit_w": 700,
        "temp_c": 70,
        "sm_clock_mhz": 1980,
        "sm_clock_max_mhz": 1980,
        "mem_clock_mhz": 2619,
        "pcie_tx_kbps": 500_000,
        "pcie_rx_kbps": 20_000_000,
        "pcie_gen": 5,
        "pcie_width": 16,
        "pcie_gen_max": 5,
        "pcie_width_max": 16,
        "throttle_reasons": 0,
    }
    return [{**base, "t_unix_s": 1000.0 + i * 0.1, **over} for i in range(n)]


CASES = [
    RuleCase(
        # the synthetic trace's GPU is an H100 SXM (default limit 700 W): a 450 W limit was lowered
        "GA901-fires-on-power-capped-clock-under-a-lowered-limit",
        "GA901",
        busy_trace,
        nvml_rows=_rows(20, sm_clock_mhz=1500, throttle_reasons=0x4, power_w=445, power_limit_w=450),
        expect=Expect(fires=True, min_severity="medium", message_contains=("SW power cap", "1500 of 1980")),
    ),
    RuleCase(
        "GA901-is-info-at-the-cards-default-power-limit",
        "GA901",
        busy_trace,
        nvml_rows=_rows(20, sm_clock_mhz=1500, throttle_reasons=0x4),
        expect=Expect(fires=True, severity="info", message_contains=("default (700 W)",)),
    ),
    RuleCase(
        "GA901-fires-on-thermal-slowdown",
        "GA901",
        busy_trace,
        nvml_rows=_rows(20, sm_clock_mhz=1200, throttle_reasons=0x20 | 0x40, temp_c=92),
        expect=Expect(fires=True, recommendation_contains=("cooling",)),
    ),
    RuleCase(
        "GA901-quiet-on-idle-reason-only",
        "GA901",
        busy_trace,
        nvml_rows=_rows(20, sm_clock_mhz=345, throttle_reasons=0x1),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA901-quiet-at-full-clock", "GA901", busy_trace, nvml_rows=_rows(20), expect=Expect(fires=False)
    ),
    RuleCase(
        "GA901-not-applicable-without-nvml",
        "GA901",
        busy_trace,
        expect=Expect(fires=False, status="not_applicable", detail_contains=("nvml",)),
    ),
    RuleCase(
        "GA902-fires-on-gen3-x8-link-during-transfers",
        "GA902",
        busy_trace,
        nvml_rows=_rows(20, pcie_gen=3, pcie_width=8),
        expect=Expect(
            fires=True, title_contains=("Gen3 x8",), evidence_keys=("copy_fraction",), impact_min=0.05
        ),
    ),
    RuleCase(
        "GA902-quiet-on-idle-link-power-saving",
        "GA902",
        busy_trace,
        nvml_rows=_rows(20, pcie_gen=1, pcie_tx_kbps=0, pcie_rx_kbps=10),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA902-quiet-at-full-link", "GA902", busy_trace, nvml_rows=_rows(20), expect=Expect(fires=False)
    ),
]
