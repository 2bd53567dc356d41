"""GA701 fp32-matmul cases. All traces are SYNTHETIC (tests/synth.py)."""

from __future__ import annotations

from tests.rules.harness import Expect, RuleCase
from tests.synth import K_NVJET_BF16, K_SIMT_SGEMM, K_XMMA_FFMA, SyntheticTrace

K_UNNAMED_GEMM = "gemm_kernel_generic_v2"


def _trace(names: list[str], types: list[str], flops: float = 2e9) -> SyntheticTrace:
    """5 steps of 1 ms, GPU-bound: each matmul kernel runs 300 us under aten::mm with the given input
    types; the host launches them at the step's start and then reads the loss (`.item()` waits for
    the GPU)."""
    st = SyntheticTrace()
    for n in range(5):
        t0 = n * 1000.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=1000.0, gpu_dur=1000.0)
        t = t0 + 20.0
        for i, name in enumerate(names):
            st.add_kernel(
                name,
                ts=t,
                dur=300.0,
                grid=(264, 1, 1),
                op="aten::mm",
                op_input_types=types,
                op_input_dims=[[4096, 4096], [4096, 4096]],
                op_flops=flops,
                launch_ts=t0 + 5.0 + 6.0 * i,
                launch_dur=3.0,
            )
            t += 310.0
        st.add_item_read(
            ts=t0 + 5.0 + 6.0 * len(names), dur=t - (t0 + 5.0 + 6.0 * len(names)), copy_ts=t - 8.0
        )
        st.add_optimizer_step(t + 5.0, 5.0)
    return st


def ffma_xmma() -> SyntheticTrace:
    # The trap of docs/trace-inputs.md ("Facts from real traces"): says xmma, computes with FFMA.
    return _trace([K_XMMA_FFMA, K_SIMT_SGEMM], ["float", "float"])


def bf16_gemm() -> SyntheticTrace:
    return _trace([K_NVJET_BF16, K_NVJET_BF16], ["c10::BFloat16", "c10::BFloat16"])


K_CUDNN_BF16_SIMT = (
    "void implicit_convolve_sgemm<__nv_bfloat16, __nv_bfloat16, 128, 5, 5, 3, 3, 3, 1, false, false, true>"
    "(int, int, int, __nv_bfloat16 const*, int, __nv_bfloat16*, __nv_bfloat16 const*, kernel_conv_params)"
)


def bf16_cuda_core_conv() -> SyntheticTrace:
    # Recorded on an H200 under bf16 autocast (control_compiled's 3-channel patch embedding): cuDNN runs
    # the convolution on CUDA cores, but on bf16 data; "sgemm" in its name does not make it FP32 math.
    return _trace([K_CUDNN_BF16_SIMT, K_NVJET_BF16], ["c10::BFloat16", "c10::BFloat16"])


def unnamed_fp32() -> SyntheticTrace:
    return _trace([K_UNNAMED_GEMM], ["float", "float"])


def fast_sgemm_named() -> SyntheticTrace:
    # 137 TFLOP/s achieved (41 TFLOP in 300 us): impossible on FP32 CUDA cores (H100 peak ~67).
    return _trace([K_SIMT_SGEMM], ["float", "float"], flops=4.1e10)


ENV_TF32 = {"settings": {"allow_tf32_matmul": True, "float32_matmul_precision": "high"}}
ENV_FP32 = {
    "settings": {
        "allow_tf32_matmul": False,
        "float32_matmul_precision": "highest",
        "autocast": {"used": False},
    }
}
V100 = {"id": 0, "name": "Tesla V100", "computeMajor": 7, "computeMinor": 0, "numSms": 80}


def v100_sgemm() -> SyntheticTrace:
    st = ffma_xmma()
    st.top["deviceProperties"] = [V100]
    return st


CASES = [
    RuleCase(
        "GA701-fires-on-xmma-ffma-and-simt-sgemm",
        "GA701",
        ffma_xmma,
        environment=ENV_FP32,
        expect=Expect(
            fires=True,
            min_severity="high",
            message_contains=("FP32", "allow_tf32=False"),
            recommendation_contains=("torch.autocast", "GradScaler", "allow_tf32"),
            location_contains=("aten::mm", "ffma"),
        ),
    ),
    RuleCase(
        "GA701-fires-on-raw-trace",
        "GA701",
        ffma_xmma,
        expect=Expect(fires=True, impact_min=0.3, impact_max=0.45),
    ),
    RuleCase("GA701-quiet-on-bf16-tensor-core-gemms", "GA701", bf16_gemm, expect=Expect(fires=False)),
    RuleCase(
        "GA701-quiet-on-bf16-data-in-a-cuda-core-conv",
        "GA701",
        bf16_cuda_core_conv,
        environment=ENV_TF32,
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA701-fires-on-unnamed-gemm-with-float-inputs",
        "GA701",
        unnamed_fp32,
        environment=ENV_FP32,
        expect=Expect(fires=True),
    ),
    RuleCase(
        "GA701-quiet-on-unnamed-gemm-when-tf32-on",
        "GA701",
        unnamed_fp32,
        environment=ENV_TF32,
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA701-quiet-when-throughput-beats-fp32-peak", "GA701", fast_sgemm_named, expect=Expect(fires=False)
    ),
    RuleCase("GA701-quiet-on-gpu-without-tf32-tensor-cores", "GA701", v100_sgemm, expect=Expect(fires=False)),
]
