"""GA501 launch-bound and GA502 unfused-optimizer cases. All traces are SYNTHETIC (tests/synth.py)."""

from __future__ import annotations

from tests.rules.harness import Expect, RuleCase
from tests.synth import K_ADAM, K_ELEMENTWISE, K_MULTI_TENSOR, SyntheticTrace


def _tiny_kernels(
    gap_us: float, launch_early: bool, kernel_us: float = 3.0, per_step: int = 200, shapes_vary: bool = False
) -> SyntheticTrace:
    """5 steps, `per_step` full-grid kernels each, `gap_us` apart. launch_early=False: each launch call
    starts after the previous kernel ended (the GPU waits for the host); True: the host launches them
    1.5 us apart from the step start, far ahead of the GPU (a queued, graph-like step). shapes_vary: the
    grid grows with the step (a new input shape every step, as variable-length batches give)."""
    st = SyntheticTrace()
    margin = 10.0 if launch_early else 100.0  # a queued (graph-like) step keeps the GPU busy to its end
    step_us = per_step * (kernel_us + gap_us) + margin
    for n in range(5):
        t0 = n * step_us
        st.add_step(n + 1, cpu_start=t0, cpu_dur=step_us, gpu_dur=step_us)
        t = t0 + margin / 2
        for i in range(per_step):
            launch = t0 + 0.5 + 1.5 * i if launch_early else t - 2.0
            st.add_kernel(
                K_ELEMENTWISE,
                ts=t,
                dur=kernel_us,
                grid=(264 + (8 * n if shapes_vary else 0), 1, 1),
                launch_ts=launch,
                launch_dur=1.0,
            )
            t += kernel_us + gap_us
    return st


def launch_bound() -> SyntheticTrace:
    return _tiny_kernels(gap_us=5.0, launch_early=False)


def launch_bound_shapes_vary() -> SyntheticTrace:
    return _tiny_kernels(gap_us=5.0, launch_early=False, shapes_vary=True)


def back_to_back() -> SyntheticTrace:
    return _tiny_kernels(gap_us=0.0, launch_early=True)


def launches_inside_an_lstm() -> SyntheticTrace:
    """The launch-bound steps, every launch inside `aten::lstm` (an nn.LSTM's per-time-step kernels)."""
    st = _tiny_kernels(gap_us=5.0, launch_early=False)
    step_us = 200 * 8.0 + 100.0
    for n in range(5):
        st.add_cpu_op("aten::lstm", ts=n * step_us + 1.0, dur=step_us - 2.0)
    return st


def gaps_inside_sync() -> SyntheticTrace:
    # Same gaps, but the host sits in cudaStreamSynchronize over the whole step: not launch cost.
    st = _tiny_kernels(gap_us=5.0, launch_early=False)
    step_us = 200 * 8.0 + 100.0
    for n in range(5):
        st.add_sync(n * step_us + 40.0, step_us - 50.0)
    return st


def _optimizer(per_tensor: bool) -> SyntheticTrace:
    """5 steps of 2 ms: 600 us of forward/backward, then the optimizer span."""
    st = SyntheticTrace()
    for n in range(5):
        t0 = n * 2000.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=2000.0, gpu_dur=2000.0)
        st.add_kernel(K_ELEMENTWISE, ts=t0 + 20.0, dur=600.0, grid=(1024, 1, 1))
        opt_start = t0 + 700.0
        if per_tensor:
            st.add_optimizer_step(opt_start, 1200.0)
            t = opt_start + 10.0
            for _ in range(150):  # 3 kernels for each of 50 parameter tensors
                st.add_kernel(K_ELEMENTWISE, ts=t + 3.0, dur=3.0, grid=(8, 1, 1), launch_ts=t, launch_dur=2.0)
                t += 7.5
        else:
            st.add_optimizer_step(opt_start, 60.0)
            st.add_kernel(K_ADAM, ts=opt_start + 15.0, dur=40.0, grid=(320, 1, 1), launch_ts=opt_start + 5.0)
    return st


def per_tensor_optimizer() -> SyntheticTrace:
    return _optimizer(True)


def fused_optimizer() -> SyntheticTrace:
    return _optimizer(False)


def _foreach_optimizer(cls: str) -> SyntheticTrace:
    """5 steps of 2 ms: 600 us of forward/backward, then a `cls` foreach update of 3 multi-tensor
    kernels of 400 us (a large model's update: memory-bound passes over parameters and state), then
    the loss read waits for the GPU."""
    st = SyntheticTrace()
    for n in range(5):
        t0 = n * 2000.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=2000.0, gpu_dur=2000.0)
        st.add_kernel(K_ELEMENTWISE, ts=t0 + 20.0, dur=600.0, grid=(1024, 1, 1), launch_ts=t0 + 5.0)
        st.add_optimizer_step(t0 + 30.0, 40.0, name=f"Optimizer.step#{cls}.step")
        for j in range(3):
            st.add_kernel(K_MULTI_TENSOR, ts=t0 + 620.0 + 400.0 * j, dur=400.0, grid=(320, 1, 1),
                          launch_ts=t0 + 32.0 + 10.0 * j)
        st.add_sync(t0 + 80.0, 1750.0, name="cudaDeviceSynchronize")
    return st


def foreach_adam() -> SyntheticTrace:
    return _foreach_optimizer("Adam")


def foreach_nadam() -> SyntheticTrace:
    return _foreach_optimizer("NAdam")


def _env(foreach: object, fused: object, compiled: bool = False) -> dict[str, object]:
    return {
        "optimizers": [
            {
                "id": 0,
                "class": "AdamW",
                "file": "train.py",
                "line": 31,
                "code": "opt = torch.optim.AdamW(model.parameters(), foreach=False)",
                "foreach": foreach,
                "fused": fused,
                "param_tensors": 50,
                "steps": 100,
            }
        ],
        "settings": {
            "torch_compile": {"used": compiled, "count": int(compiled)},
            "cuda_graphs": {"used": compiled, "count": int(compiled)},
        },
    }


def _capture_manifest(unprofiled_ms: float, profiled_ms: float) -> dict[str, object]:
    """A manifest whose host step timings say steps outside the profiler window took `unprofiled_ms`
    and steps inside it `profiled_ms` (skip 10, warmup 2, record 12..16)."""
    t, ends = 1000.0, []
    for c in range(1, 18):
        ends.append([c, round(t, 6)])
        in_window = 12 <= c - 1 <= 16 or c - 1 in (10, 11)
        t += (profiled_ms if in_window else unprofiled_ms) / 1e3
    return {
        "capture": {
            "skip_steps": 10,
            "warmup_steps": 2,
            "active_steps": 5,
            "first_recorded_step": 12,
            "last_recorded_step": 16,
            "step_ends": ends,
        }
    }


CASES = [
    RuleCase(
        "GA501-fires-when-gpu-waits-for-each-launch",
        "GA501",
        launch_bound,
        expect=Expect(
            fires=True,
            min_severity="high",
            recommendation_contains=("torch.compile", "reduce-overhead"),
            # a raw trace: no unprofiled step times, so the message says the estimate is an upper bound
            message_contains=("upper bound",),
            evidence_keys=("gpu_idle_waiting_for_launches_fraction", "kernels_per_step"),
        ),
    ),
    RuleCase(
        # The same launch-bound steps, but each step's kernels have another grid (a new input shape every
        # step): CUDA graphs would be recorded per shape, so no compile gain is claimed.
        "GA501-info-without-gain-when-shapes-change-between-steps",
        "GA501",
        launch_bound_shapes_vary,
        expect=Expect(
            fires=True,
            count=1,
            severity="info",
            title_contains=("input shapes change between steps",),
            message_contains=("launch patterns in 4 analyzed steps", "no gain is predicted"),
            recommendation_contains=("fixed shapes", "reduce-overhead"),
            evidence_keys=("launch_patterns", "predicted_gain_cuda_graphs_if_shapes_were_static"),
        ),
    ),
    RuleCase(
        "GA501-fires-with-compile-advice-when-compiled-but-launch-bound",
        "GA501",
        launch_bound,
        environment=_env(None, None, compiled=True),
        expect=Expect(
            fires=True,
            message_contains=("yet launches still dominate",),
            recommendation_contains=("graph breaks",),
        ),
    ),
    RuleCase(
        "GA501-quiet-on-back-to-back-kernels-with-cuda-graphs",
        "GA501",
        back_to_back,
        environment=_env(None, None, compiled=True),
        expect=Expect(fires=False),
    ),
    RuleCase(
        # The synthetic step is 1.7 ms with ~1.0 ms of launch-bound idle; outside the window the host
        # measured 0.65 ms steps (kernels alone take 0.6 ms): the profiler's own per-op cost explains the idle, the real run is not
        # launch-bound.
        "GA501-quiet-when-profiler-overhead-explains-the-idle",
        "GA501",
        launch_bound,
        manifest=_capture_manifest(unprofiled_ms=0.65, profiled_ms=1.7),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA501-fires-when-steps-outside-the-window-are-as-slow",
        "GA501",
        launch_bound,
        manifest=_capture_manifest(unprofiled_ms=1.65, profiled_ms=1.7),
        expect=Expect(fires=True, evidence_keys=("profiler_host_scale", "unprofiled_step_time_ms")),
    ),
    RuleCase("GA501-quiet-when-gaps-are-host-sync", "GA501", gaps_inside_sync, expect=Expect(fires=False)),
    # torch.compile breaks the graph at nn.LSTM/GRU/RNN and runs them eagerly: no gain to claim there
    # (lstm_lm on an H200: "compiling saves 67-75%", measured 1.00-1.03x)
    RuleCase("GA501-quiet-when-the-launches-are-inside-an-lstm", "GA501", launches_inside_an_lstm, expect=Expect(fires=False)),
    RuleCase(
        "GA501-quiet-below-kernel-count-threshold",
        "GA501",
        launch_bound,
        thresholds={"min_kernels_per_step": 500},
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA502-fires-on-per-tensor-optimizer",
        "GA502",
        per_tensor_optimizer,
        environment=_env(False, None),
        expect=Expect(
            fires=True,
            min_severity="high",
            recommendation_contains=("fused=True",),
            location_contains=("train.py:31",),
            message_contains=("foreach=False",),
            evidence_keys=("optimizer_kernel_ms_per_step", "kernels_per_param_tensor"),
        ),
    ),
    RuleCase(
        "GA502-fires-on-raw-trace-without-settings",
        "GA502",
        per_tensor_optimizer,
        expect=Expect(fires=True, title_contains=("Per-tensor optimizer",)),
    ),
    RuleCase(
        "GA502-quiet-on-fused-multi-tensor-optimizer",
        "GA502",
        fused_optimizer,
        environment=_env(None, True),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA502-fires-on-a-long-foreach-adam-update",
        "GA502",
        foreach_adam,
        expect=Expect(fires=True, title_contains=("Adam runs foreach",), recommendation_contains=("fused=True",)),
    ),
    RuleCase(
        # NAdam has no fused implementation (fused=True raises a TypeError): nothing to advise
        "GA502-quiet-on-foreach-nadam-without-a-fused-variant",
        "GA502",
        foreach_nadam,
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA502-quiet-on-foreach-multi-tensor-small-share",
        "GA502",
        fused_optimizer,
        environment=_env(None, None),
        expect=Expect(fires=False),
    ),
]
