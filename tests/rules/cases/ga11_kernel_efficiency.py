"""GA11xx kernel_efficiency cases. All traces are SYNTHETIC (tests/synth.py): kernel names as Kineto
spells them on an H100/H200 with torch 2.11 (sample_runs/), durations chosen to the scale a GPT block
at sequence 1024 or a ResNet block shows there."""

from __future__ import annotations

from collections.abc import Sequence

from tests.rules.harness import Expect, RuleCase
from tests.synth import K_ELEMENTWISE, K_FLASH, K_NVJET_BF16, SyntheticTrace

BF16 = "c10::BFloat16"
K_BMM = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_NNT"
K_SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"
)
K_SOFTMAX_BWD = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxBackwardEpilogue>(float*, float const*, float const*, long)"
)
K_MASKED_FILL = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::masked_fill_kernel"
    "(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda(c10::BFloat16, bool)#1}> >"
    "(int, at::native::gpu_kernel_impl_nocast<...>)"
)
K_COPY = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >"
)


def _attention_trace(
    seq: int, lead: int = 48, head: int = 64, layers: int = 4, flash: bool = False
) -> SyntheticTrace:
    """4 steps, GPU-bound: per layer an MLP GEMM (400 us) and attention over [lead, seq, seq] scores,
    hand-written (q @ k^T, scale, causal masked_fill, float32 softmax, cast back, @ v, and the backward
    of each) or fused (flash forward + backward); the host reads the loss at the end of each step."""
    st = SyntheticTrace()
    scores = [lead, seq, seq]
    q = [lead, seq, head]
    kt = [lead, head, seq]
    # time of one pass over the scores in bf16 at ~2.5 TB/s (read + write)
    pass_us = max(2.0, lead * seq * seq * 2 * 2 / 2.5e6)
    step_us = 0.0
    for n in range(4):
        t0 = n * 20000.0
        t = t0 + 20.0
        launch = t0 + 5.0
        kernels: list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]] = []
        for _ in range(layers):
            kernels.append((K_NVJET_BF16, 400.0, "aten::mm", [BF16, BF16], [[4096, 3072], [3072, 768]]))
            if flash:
                kernels.append(
                    (K_FLASH, 30.0, "aten::_flash_attention_forward", [BF16] * 3, [[4, seq, 12, head]] * 3)
                )
                kernels.append(
                    (
                        K_FLASH.replace("fwd", "bwd"),
                        90.0,
                        "aten::_flash_attention_backward",
                        [BF16] * 4,
                        [[4, seq, 12, head]] * 4,
                    )
                )
                continue
            kernels += [
                (K_BMM, 20.0, "aten::bmm", [BF16, BF16], [q, kt]),
                (K_ELEMENTWISE, pass_us, "aten::mul", [BF16, "Scalar"], [scores, []]),
                (
                    K_MASKED_FILL,
                    pass_us,
                    "aten::masked_fill",
                    [BF16, "bool", "Scalar"],
                    [scores, [1, 1, seq, seq], []],
                ),
                (K_COPY, 1.5 * pass_us, "aten::_to_copy", [BF16], [scores]),
                (K_SOFTMAX, 2.0 * pass_us, "aten::_softmax", ["float", "Scalar", "Scalar"], [scores, [], []]),
                (K_COPY, 1.5 * pass_us, "aten::_to_copy", ["float"], [scores]),
                (K_BMM, 25.0, "aten::bmm", [BF16, BF16], [scores, [lead, seq, head]]),
                # backward
                (K_BMM, 30.0, "aten::bmm", [BF16, BF16], [scores, [lead, seq, head]]),
                (K_COPY, 1.5 * pass_us, "aten::_to_copy", [BF16], [scores]),
                (
                    K_SOFTMAX_BWD,
                    3.0 * pass_us,
                    "aten::_softmax_backward_data",
                    ["float", "float", "Scalar", "Scalar"],
                    [scores, scores, [], []],
                ),
                (K_COPY, 1.5 * pass_us, "aten::_to_copy", ["float"], [scores]),
                (
                    K_MASKED_FILL,
                    pass_us,
                    "aten::masked_fill",
                    [BF16, "bool", "Scalar"],
                    [scores, [1, 1, seq, seq], []],
                ),
                (K_ELEMENTWISE, pass_us, "aten::mul", [BF16, "Scalar"], [scores, []]),
                (K_BMM, 30.0, "aten::bmm", [BF16, BF16], [scores, q]),
            ]
        for name, dur, op, types, dims in kernels:
            st.add_kernel(
                name,
                ts=t,
                dur=dur,
                grid=(264, 1, 1),
                op=op,
                op_input_types=types,
                op_input_dims=dims,
                launch_ts=launch,
                launch_dur=3.0,
            )
            launch += 6.0
            t += dur + 2.0
        step_us = t - t0 + 60.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=step_us, gpu_dur=step_us)
        st.add_item_read(ts=launch + 2.0, dur=t - launch, copy_ts=t + 2.0)
        st.add_optimizer_step(t + 10.0, 5.0)
    return st


def gpt_manual_attention() -> SyntheticTrace:
    return _attention_trace(1024)


def gpt_flash_attention() -> SyntheticTrace:
    return _attention_trace(1024, flash=True)


def short_sequence_attention() -> SyntheticTrace:
    # scores [48, 16, 16]: a gate or a tiny attention, not worth a fused kernel (below min seq 32)
    return _attention_trace(16)


CASES = [
    RuleCase(
        "GA1101-fires-on-hand-written-causal-attention",
        "GA1101",
        gpt_manual_attention,
        expect=Expect(
            fires=True,
            min_severity="high",
            message_contains=("[48, 1024, 1024]", "causal", "float32"),
            recommendation_contains=("scaled_dot_product_attention", "is_causal=True"),
            location_contains=("aten::_softmax",),
        ),
    ),
    RuleCase("GA1101-quiet-on-flash-attention", "GA1101", gpt_flash_attention, expect=Expect(fires=False)),
    RuleCase(
        "GA1101-quiet-on-short-sequences", "GA1101", short_sequence_attention, expect=Expect(fires=False)
    ),
]


# ---- conv nets: layout and precision ------------------------------------------------------------------

K_NCHW2NHWC = (
    "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, "
    "(cudnnKernelDataType_t)2>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)"
)
K_NHWC2NCHW = (
    "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, true, false, "
    "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nhwc2nchw_params_t<float>, float const*, float*)"
)
K_FPROP_TF32 = "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"
K_DGRAD_TF32 = "sm90_xmma_dgrad_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize256x128x32_warpgroupsize2x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"
K_WGRAD_TF32 = "sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_g1_execute_segment_k_on_kernel__5x_cudnn"
K_FPROP_BF16 = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"
K_DGRAD_BF16 = "sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"
K_WGRAD_BF16 = "sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_segment_k_on_kernel__5x_cudnn"
K_BN_STATS = "void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, float, int>(at::GenericPackedTensorAccessor<float const, 3ul, at::RestrictPtrTraits, int>, float, float, at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, int>)"
K_BN_APPLY = "void at::native::batch_norm_transform_input_kernel<float, float, float, int>(at::GenericPackedTensorAccessor<float const, 3ul, at::RestrictPtrTraits, int>)"
K_BN_STATS_CL = "void at::native::batch_norm_collect_statistics_channels_last_kernel<at::native::Var, c10::BFloat16, float, 4>(c10::BFloat16 const*, float*, float*, float volatile*, int*, int, int, float)"
K_RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, float, std::array<char*, 2ul>)"


def _convnet_trace(bf16_channels_last: bool = False) -> SyntheticTrace:
    """4 steps of 8 ResNet-style blocks at [256, 64, 56, 56], GPU-bound. FP32 NCHW (cuDNN's default TF32
    convolutions, nchwToNhwc/nhwcToNchw transposes around each, FP32 BatchNorm and ReLU), or bf16
    channels_last (no transposes, bf16 kernels at about half the time)."""
    st = SyntheticTrace()
    act = [256, 64, 56, 56]
    w = [64, 64, 3, 3]
    dt = BF16 if bf16_channels_last else "float"
    s = 0.5 if bf16_channels_last else 1.0
    for n in range(4):
        t0 = n * 40000.0
        t = t0 + 20.0
        launch = t0 + 5.0
        kernels: list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]] = []
        for _ in range(8):
            conv = [(dt, dt), [act, w]]
            bconv = [(dt, dt, dt), [act, act, w]]
            if not bf16_channels_last:
                kernels.append((K_NCHW2NHWC, 90.0, "aten::cudnn_convolution", *conv))
            kernels.append(
                (
                    K_FPROP_BF16 if bf16_channels_last else K_FPROP_TF32,
                    420.0 * s,
                    "aten::cudnn_convolution",
                    *conv,
                )
            )
            if not bf16_channels_last:
                kernels.append((K_NHWC2NCHW, 90.0, "aten::cudnn_convolution", *conv))
            bn = [(dt, "float", "float"), [act, [64], [64]]]
            kernels.append(
                (
                    K_BN_STATS_CL if bf16_channels_last else K_BN_STATS,
                    160.0 * s,
                    "aten::native_batch_norm",
                    *bn,
                )
            )
            kernels.append((K_BN_APPLY, 120.0 * s, "aten::native_batch_norm", *bn))
            kernels.append((K_RELU, 80.0 * s, "aten::clamp_min_", (dt, "Scalar"), [act, []]))
            # backward
            kernels.append((K_RELU, 80.0 * s, "aten::threshold_backward", (dt, dt, "Scalar"), [act, act, []]))
            kernels.append(
                (
                    K_BN_STATS,
                    200.0 * s,
                    "aten::native_batch_norm_backward",
                    (dt, dt, "float"),
                    [act, act, [64]],
                )
            )
            if not bf16_channels_last:
                kernels.append((K_NCHW2NHWC, 90.0, "aten::convolution_backward", *bconv))
                kernels.append((K_NCHW2NHWC, 90.0, "aten::convolution_backward", *bconv))
            kernels.append(
                (
                    K_DGRAD_BF16 if bf16_channels_last else K_DGRAD_TF32,
                    430.0 * s,
                    "aten::convolution_backward",
                    *bconv,
                )
            )
            kernels.append(
                (
                    K_WGRAD_BF16 if bf16_channels_last else K_WGRAD_TF32,
                    450.0 * s,
                    "aten::convolution_backward",
                    *bconv,
                )
            )
            if not bf16_channels_last:
                kernels.append((K_NHWC2NCHW, 90.0, "aten::convolution_backward", *bconv))
        for name, dur, op, types, dims in kernels:
            st.add_kernel(
                name,
                ts=t,
                dur=dur,
                grid=(264, 1, 1),
                op=op,
                op_input_types=list(types),
                op_input_dims=dims,
                launch_ts=launch,
                launch_dur=3.0,
            )
            launch += 6.0
            t += dur + 2.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=t - t0 + 60.0, gpu_dur=t - t0 + 60.0)
        st.add_item_read(ts=launch + 2.0, dur=t - launch, copy_ts=t + 2.0)
        st.add_optimizer_step(t + 10.0, 5.0)
    return st


def resnet_fp32_nchw() -> SyntheticTrace:
    return _convnet_trace()


def resnet_bf16_channels_last() -> SyntheticTrace:
    return _convnet_trace(bf16_channels_last=True)


CASES += [
    RuleCase(
        "GA1102-fires-on-nchw-transposes",
        "GA1102",
        resnet_fp32_nchw,
        expect=Expect(
            fires=True,
            min_severity="medium",
            message_contains=("NCHW", "bf16 autocast alone", "channels_last with bf16"),
            recommendation_contains=("memory_format=torch.channels_last",),
            location_contains=("nchwToNhwcKernel",),
        ),
    ),
    RuleCase(
        "GA1103-fires-on-tf32-convolutions",
        "GA1103",
        resnet_fp32_nchw,
        expect=Expect(
            fires=True, message_contains=("TF32", "NCHW"), recommendation_contains=("torch.autocast",)
        ),
    ),
    RuleCase(
        "GA1102-quiet-on-bf16-channels-last", "GA1102", resnet_bf16_channels_last, expect=Expect(fires=False)
    ),
    RuleCase(
        "GA1103-quiet-on-bf16-channels-last", "GA1103", resnet_bf16_channels_last, expect=Expect(fires=False)
    ),
    RuleCase("GA1101-quiet-on-a-conv-net", "GA1101", resnet_fp32_nchw, expect=Expect(fires=False)),
]


# ---- GEMM shapes and the vocabulary loss --------------------------------------------------------------------

K_GEMM_ALIGN2 = (
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x5_tn_align2>(Params)"
)
K_LOG_SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)"
)
K_LOG_SOFTMAX_BWD = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, long)"
)
K_NLL = "void nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)"
K_NLL_BWD = "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)"


def _gpu_bound(
    kernels: list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]],
) -> SyntheticTrace:
    """4 GPU-bound steps of the given kernels (name, us, op, input types, input dims), the loss read at
    the end of each step."""
    st = SyntheticTrace()
    period = sum(k[1] + 2.0 for k in kernels) + 200.0
    for n in range(4):
        t0 = n * period
        t = t0 + 20.0
        launch = t0 + 5.0
        for name, dur, op, types, dims in kernels:
            st.add_kernel(
                name,
                ts=t,
                dur=dur,
                grid=(264, 1, 1),
                op=op,
                op_input_types=list(types),
                op_input_dims=dims,
                launch_ts=launch,
                launch_dur=3.0,
            )
            launch += 6.0
            t += dur + 2.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=t - t0 + 60.0, gpu_dur=t - t0 + 60.0)
        st.add_item_read(ts=launch + 2.0, dur=t - launch, copy_ts=t + 2.0)
        st.add_optimizer_step(t + 10.0, 5.0)
    return st


def _mlp(odd: bool) -> SyntheticTrace:
    return _gpu_bound(_mlp_kernels(odd))


def _mlp_kernels(odd: bool) -> list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]]:
    # aligned: [8192, 1024] x [1024, 4096] in ~100 us (~690 TFLOP/s); odd: K = 1001, N = 4097 through an
    # align2 tile in 400 us
    ks: list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]] = []
    for _ in range(6):
        ks.append((K_NVJET_BF16, 100.0, "aten::mm", [BF16, BF16], [[8192, 1024], [1024, 4096]]))
        if odd:
            ks.append((K_GEMM_ALIGN2, 400.0, "aten::mm", [BF16, BF16], [[8192, 1001], [1001, 4097]]))
        else:
            ks.append((K_NVJET_BF16, 100.0, "aten::mm", [BF16, BF16], [[8192, 1024], [1024, 4096]]))
    return ks


def odd_gemm_mlp() -> SyntheticTrace:
    return _mlp(odd=True)


def odd_gemm_mlp_host_paced() -> SyntheticTrace:
    """Synthetic: the misaligned GEMMs of `odd_gemm_mlp` (2.4 ms of their 3 ms of GPU work per step) in a
    raw trace whose host, the profiler's cost included, launches them 700 us apart: the host sets the
    pace (8.4 ms per step), and a raw trace cannot say how much of that is the profiler's."""
    st = SyntheticTrace()
    ks = [k for k in _mlp_kernels(odd=True)]
    period = len(ks) * 700.0 + 300.0
    for n in range(4):
        t0 = n * period
        launch = t0 + 5.0
        for name, dur, op, types, dims in ks:
            st.add_kernel(
                name, ts=launch + 8.0, dur=dur, grid=(264, 1, 1), op=op, op_input_types=list(types),
                op_input_dims=dims, launch_ts=launch, launch_dur=3.0,
            )
            launch += 700.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=period, gpu_dur=period)
        st.add_optimizer_step(launch + 10.0, 5.0)
    return st


def aligned_gemm_mlp() -> SyntheticTrace:
    return _mlp(odd=False)


def _lm_loss(vocab: int, hand_written: bool = True, scale_gradient: bool = False) -> SyntheticTrace:
    return _gpu_bound(_lm_loss_kernels(vocab, hand_written, scale_gradient))


def _lm_loss_kernels(
    vocab: int, hand_written: bool = True, scale_gradient: bool = False
) -> list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]]:
    """bf16 GEMMs (10 ms) then the loss over [8192, vocab] logits upcast to FP32 (times of a 128k vocab
    on an H100: each FP32 pass over 1e9 values takes milliseconds): a log-sum-exp written by hand
    (amax, subtract, exp, sum, subtract, gather, and their backward), or PyTorch's cross-entropy
    (log_softmax and nll_loss in float32, as autocast runs them)."""
    scale = vocab / 128256
    logits = [8192, vocab]
    rows = [8192, 1]
    ks: list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]] = [
        (K_NVJET_BF16, 1000.0, "aten::mm", [BF16, BF16], [[8192, 4096], [4096, 4096]]) for _ in range(8)
    ]
    # the LM head makes the logits: [8192, 4096] x [4096, vocab]
    ks.append((K_NVJET_BF16, 2000.0 * scale, "aten::mm", [BF16, BF16], [[8192, 4096], [4096, vocab]]))
    ks.append((K_COPY, 2000.0 * scale, "aten::_to_copy", [BF16], [logits]))
    if hand_written:
        ks += [
            (K_REDUCE_MEAN, 1500.0 * scale, "aten::amax", ["float"], [logits]),
            (K_ELEMENTWISE, 3000.0 * scale, "aten::sub", ["float", "float"], [logits, rows]),
            (K_ELEMENTWISE, 3000.0 * scale, "aten::exp", ["float"], [logits]),
            (K_REDUCE_MEAN, 1500.0 * scale, "aten::sum", ["float"], [logits]),
            (K_ELEMENTWISE, 3000.0 * scale, "aten::sub", ["float", "float"], [logits, rows]),
            (K_ELEMENTWISE, 3000.0 * scale, "aten::exp", ["float"], [logits]),
            (K_ELEMENTWISE, 3000.0 * scale, "aten::mul", ["float", "float"], [rows, logits]),
            (K_ELEMENTWISE, 3000.0 * scale, "aten::sub", ["float", "float"], [logits, logits]),
        ]
    else:
        ks += [
            (
                K_LOG_SOFTMAX,
                3000.0 * scale,
                "aten::_log_softmax",
                ["float", "Scalar", "Scalar"],
                [logits, [], []],
            ),
            (
                K_NLL,
                50.0,
                "aten::nll_loss_forward",
                ["float", "long int", "", "Scalar", "Scalar"],
                [logits, [8192], [], [], []],
            ),
            (
                K_NLL_BWD,
                1500.0 * scale,
                "aten::nll_loss_backward",
                ["float", "float", "long int"],
                [[], logits, [8192]],
            ),
            (
                K_LOG_SOFTMAX_BWD,
                3000.0 * scale,
                "aten::_log_softmax_backward_data",
                ["float", "float", "Scalar", "Scalar"],
                [logits, logits, [], []],
            ),
        ]
    if scale_gradient:
        ks.append((K_ELEMENTWISE, 3000.0 * scale, "aten::mul", ["float", "Scalar"], [logits, []]))
    ks.append((K_COPY, 2000.0 * scale, "aten::_to_copy", ["float"], [logits]))
    return ks


def fp32_vocab_loss() -> SyntheticTrace:
    return _lm_loss(128256)


def small_vocab_loss() -> SyntheticTrace:
    return _lm_loss(1000)


def fp32_vocab_loss_in_chains() -> SyntheticTrace:
    """Synthetic: vocab_fp32_loss's shape on an H200: the hand-written FP32 log-softmax over [8192, 128256]
    logits and its backward as several chains per step (a gather breaks them), 40% of the step, after
    bf16 GEMMs. Compiling the model does not reach a loss written after its call (measured 1.04x)."""
    logits, rows = [8192, 128256], [8192, 1]
    ks: list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]] = [
        (K_NVJET_BF16, 2000.0, "aten::mm", [BF16, BF16], [[8192, 4096], [4096, 4096]]) for _ in range(10)
    ]
    ks.append((K_NVJET_BF16, 2000.0, "aten::mm", [BF16, BF16], [[8192, 4096], [4096, 128256]]))
    chain = [
        (K_ELEMENTWISE, 1000.0, "aten::sub", ["float", "float"], [logits, rows]),
        (K_ELEMENTWISE, 1000.0, "aten::exp", ["float"], [logits]),
        (K_ELEMENTWISE, 1000.0, "aten::mul", ["float", "float"], [rows, logits]),
        (K_ELEMENTWISE, 1000.0, "aten::neg", ["float"], [logits]),
    ]
    for _ in range(4):
        ks += chain
        ks.append((K_COPY, 50.0, "aten::gather", ["float", "Scalar", "long int"], [logits, [], [8192, 1]]))
    return _gpu_bound(ks)


def pytorch_cross_entropy_loss() -> SyntheticTrace:
    return _lm_loss(128256, hand_written=False)


def fp32_vocab_loss_host_ahead() -> SyntheticTrace:
    """Synthetic: the hand-written FP32 loss of `fp32_vocab_loss` in a GPU-bound run whose host runs ahead
    of the device: each 4 ms CPU step launches ~31 ms of kernels and nothing waits (no read, no sync),
    so the kernels of the analyzed steps run long after their CPU steps end, and the loss's kernel time
    per step is several CPU steps (issue 41: "FP32 loss ... (169% of the step)")."""
    st = SyntheticTrace()
    gpu_t = 20.0
    for n in range(4):
        cpu0 = n * 4000.0
        launch = cpu0 + 10.0
        for name, dur, op, types, dims in _lm_loss_kernels(128256):
            st.add_kernel(
                name, ts=gpu_t, dur=dur, grid=(264, 1, 1), op=op, op_input_types=list(types),
                op_input_dims=dims, launch_ts=launch, launch_dur=3.0,
            )
            launch += 150.0
            gpu_t += dur + 2.0
        st.add_step(n + 1, cpu_start=cpu0, cpu_dur=4000.0, gpu_dur=4000.0)
        st.add_optimizer_step(launch + 10.0, 5.0)
    return st


def squared_error_over_a_wide_head() -> SyntheticTrace:
    """Synthetic: a regression whose head makes [4096, 65536] outputs in bf16 and whose squared error is
    written by hand in FP32 (upcast, subtract, square, mean, and the backward's multiply and subtract):
    a row-wise loss over a wide output, but no log-softmax over a class axis (issue 41: GA1105 called it
    a 65536-word vocabulary and priced a fused cross-entropy)."""
    out = [4096, 65536]
    ks: list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]] = [
        (K_NVJET_BF16, 1000.0, "aten::mm", [BF16, BF16], [[4096, 4096], [4096, 4096]]) for _ in range(6)
    ]
    ks.append((K_NVJET_BF16, 1200.0, "aten::mm", [BF16, BF16], [[4096, 1024], [1024, 65536]]))
    ks += [
        (K_COPY, 700.0, "aten::_to_copy", [BF16], [out]),
        (K_COPY, 700.0, "aten::_to_copy", [BF16], [out]),
        (K_ELEMENTWISE, 900.0, "aten::sub", ["float", "float"], [out, out]),
        (K_ELEMENTWISE, 900.0, "aten::pow", ["float", "Scalar"], [out, []]),
        (K_REDUCE_MEAN, 600.0, "aten::mean", ["float"], [out]),
        (K_ELEMENTWISE, 900.0, "aten::mul", ["float", "float"], [out, out]),
        (K_ELEMENTWISE, 900.0, "aten::mul", ["float", "Scalar"], [out, []]),
        (K_COPY, 700.0, "aten::_to_copy", ["float"], [out]),
    ]
    return _gpu_bound(ks)


def autocast_cross_entropy_with_a_scale() -> SyntheticTrace:
    """Synthetic: PyTorch's cross-entropy under autocast (float32 log_softmax and nll_loss) over a 32k
    vocabulary, with one more op over the FP32 logits' gradient (a scale, as gradient accumulation or a
    loss weight puts there): the standard path, no log-softmax by hand (issue 41: a tuned GPT control got
    "GA1105 medium 8%", never measured)."""
    return _lm_loss(32768, hand_written=False, scale_gradient=True)


CASES += [
    RuleCase(
        "GA1104-fires-on-odd-gemm-shapes",
        "GA1104",
        odd_gemm_mlp,
        expect=Expect(
            fires=True,
            min_severity="medium",
            message_contains=("K=1001", "N=4097"),
            recommendation_contains=("multiple of 8", "4097"),
        ),
    ),
    RuleCase("GA1104-quiet-on-aligned-gemms", "GA1104", aligned_gemm_mlp, expect=Expect(fires=False)),
    RuleCase(
        "GA1104-says-what-a-host-paced-raw-trace-cannot-price",
        "GA1104",
        odd_gemm_mlp_host_paced,
        expect=Expect(
            fires=True,
            severity="info",
            title_contains=("not priced on this raw trace",),
            recommendation_contains=("--step-time-ms",),
        ),
    ),
    RuleCase(
        "GA1105-fires-on-an-fp32-128k-vocab-loss",
        "GA1105",
        fp32_vocab_loss,
        expect=Expect(
            fires=True,
            min_severity="medium",
            message_contains=("[8192, 128256]", "aten::exp"),
            recommendation_contains=("fused cross-entropy",),
        ),
    ),
    RuleCase("GA1105-quiet-on-a-small-vocabulary", "GA1105", small_vocab_loss, expect=Expect(fires=False)),
    RuleCase(
        "GA1105-says-no-share-over-the-whole-step-when-the-host-runs-ahead",
        "GA1105",
        fp32_vocab_loss_host_ahead,
        expect=Expect(fires=True, min_severity="medium"),
    ),
    RuleCase(
        "GA1105-quiet-on-a-squared-error-over-a-wide-head",
        "GA1105",
        squared_error_over_a_wide_head,
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA1105-quiet-on-autocast-cross-entropy-with-a-scaled-gradient",
        "GA1105",
        autocast_cross_entropy_with_a_scale,
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA1105-quiet-on-pytorch-cross-entropy-in-fp32",
        "GA1105",
        pytorch_cross_entropy_loss,
        expect=Expect(fires=False),
    ),
]


# ---- hand-written elementwise chains ------------------------------------------------------------------------

K_LAYER_NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float const*, float const*, float const*, float*, float*, float*)"
K_GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, float, std::array<char*, 2ul>)"


def _mlp_chains(hand_written: bool) -> SyntheticTrace:
    """8 MLP blocks on 16k tokens x 1024 (hidden 4096) in FP32 activations: LayerNorm and the tanh GELU by
    hand (one kernel per operator, ~45 us a pass over [16384, 1024] and ~180 us over [16384, 4096] at
    ~3 TB/s), or as library ops (one kernel each)."""
    x = [16384, 1024]
    h = [16384, 4096]
    stat = [16384, 1]
    ks: list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]] = []
    for _ in range(8):
        if hand_written:
            ks += [
                (K_REDUCE_MEAN, 30.0, "aten::mean", ["float"], [x]),
                (K_ELEMENTWISE, 45.0, "aten::sub", ["float", "float"], [x, stat]),
                (K_ELEMENTWISE, 45.0, "aten::pow", ["float", "Scalar"], [x, []]),
                (K_REDUCE_MEAN, 30.0, "aten::mean", ["float"], [x]),
                (K_ELEMENTWISE, 5.0, "aten::add", ["float", "Scalar"], [stat, []]),
                (K_ELEMENTWISE, 5.0, "aten::sqrt", ["float"], [stat]),
                (K_ELEMENTWISE, 45.0, "aten::div", ["float", "float"], [x, stat]),
                (K_ELEMENTWISE, 45.0, "aten::mul", ["float", "float"], [x, [1024]]),
                (K_ELEMENTWISE, 45.0, "aten::add", ["float", "float"], [x, [1024]]),
            ]
        else:
            ks.append(
                (
                    K_LAYER_NORM,
                    50.0,
                    "aten::native_layer_norm",
                    ["float", "ScalarList", "float", "float"],
                    [x, [], [1024], [1024]],
                )
            )
        ks.append((K_NVJET_BF16, 250.0, "aten::mm", [BF16, BF16], [[16384, 1024], [1024, 4096]]))
        if hand_written:
            ks += [
                (K_ELEMENTWISE, 180.0, "aten::pow", ["float", "Scalar"], [h, []]),
                (K_ELEMENTWISE, 180.0, "aten::mul", ["float", "Scalar"], [h, []]),
                (K_ELEMENTWISE, 180.0, "aten::add", ["float", "float"], [h, h]),
                (K_ELEMENTWISE, 180.0, "aten::mul", ["float", "Scalar"], [h, []]),
                (K_ELEMENTWISE, 180.0, "aten::tanh", ["float"], [h]),
                (K_ELEMENTWISE, 180.0, "aten::add", ["float", "Scalar"], [h, []]),
                (K_ELEMENTWISE, 180.0, "aten::mul", ["float", "float"], [h, h]),
                (K_ELEMENTWISE, 180.0, "aten::mul", ["float", "Scalar"], [h, []]),
            ]
        else:
            ks.append((K_GELU, 180.0, "aten::gelu", ["float", ""], [h, []]))
        ks.append((K_NVJET_BF16, 250.0, "aten::mm", [BF16, BF16], [[16384, 4096], [4096, 1024]]))
    return _gpu_bound(ks)


K_REDUCE_MEAN = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
    "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)"
)


def hand_written_mlp() -> SyntheticTrace:
    return _mlp_chains(hand_written=True)


def library_mlp() -> SyntheticTrace:
    return _mlp_chains(hand_written=False)


def _squared_error_head(loss_us: float) -> SyntheticTrace:
    """Synthetic: 4 bf16 GEMMs of an MLP, a wide head, then a squared error by hand over its [4096, 65536]
    output upcast to FP32 (copy, sub, pow, mean: one chain a step, not repeated per layer), each pass
    `loss_us`."""
    out = [4096, 65536]
    ks: list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]] = [
        (K_NVJET_BF16, 250.0, "aten::mm", [BF16, BF16], [[4096, 4096], [4096, 4096]]) for _ in range(4)
    ]
    ks.append((K_NVJET_BF16, 650.0, "aten::mm", [BF16, BF16], [[4096, 1024], [1024, 65536]]))
    ks += [
        (K_ELEMENTWISE, loss_us, "aten::copy_", ["float", "c10::BFloat16"], [out, out]),
        (K_ELEMENTWISE, loss_us, "aten::sub", ["float", "float"], [out, out]),
        (K_ELEMENTWISE, loss_us, "aten::pow", ["float", "Scalar"], [out, []]),
        (K_REDUCE_MEAN, loss_us / 2, "aten::mean", ["float"], [out]),
    ]
    return _gpu_bound(ks)


def squared_error_wide_head() -> SyntheticTrace:
    return _squared_error_head(500.0)  # 1.75 ms of a ~3.5 ms step


def squared_error_narrow_head() -> SyntheticTrace:
    return _squared_error_head(60.0)  # 0.21 ms of a ~2 ms step


CASES += [
    RuleCase(
        "GA1106-fires-on-a-one-off-loss-chain-of-half-the-step",
        "GA1106",
        squared_error_wide_head,
        expect=Expect(
            fires=True,
            message_contains=("1 chains per step", "aten::pow"),
            recommendation_contains=("loss_fn = torch.compile(loss_fn)", "not repeated per layer"),
        ),
    ),
    RuleCase("GA1106-quiet-on-a-small-one-off-chain", "GA1106", squared_error_narrow_head, expect=Expect(fires=False)),
    RuleCase(
        "GA1106-fires-on-hand-written-layernorm-and-gelu",
        "GA1106",
        hand_written_mlp,
        expect=Expect(
            fires=True,
            min_severity="high",
            message_contains=("chains per step", "aten::mul"),
            recommendation_contains=("torch.compile", "nn.LayerNorm"),
        ),
    ),
    RuleCase("GA1106-quiet-on-library-layernorm-and-gelu", "GA1106", library_mlp, expect=Expect(fires=False)),
    # the chains over the logits are GA1105's: it fires there, and GA1106 does not price them again
    RuleCase("GA1105-fires-on-a-loss-in-chains", "GA1105", fp32_vocab_loss_in_chains, expect=Expect(fires=True)),
    RuleCase("GA1106-quiet-on-a-hand-written-vocab-loss", "GA1106", fp32_vocab_loss_in_chains, expect=Expect(fires=False)),
]


# ---- TF32 matmuls: priced when their shapes are recorded ----------------------------------------------------

K_GEMM_TF32 = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"


def _tf32_gemms(op: str, dims: Sequence[Sequence[int]]) -> SyntheticTrace:
    # [8192, 4096] x [4096, 4096] in TF32: 275 GFLOP in 800 us (~340 TFLOP/s, 70% of the TF32 peak)
    ks: list[tuple[str, float, str, Sequence[str], Sequence[Sequence[int]]]] = [
        (K_GEMM_TF32, 800.0, op, ["float", "float"], dims) for _ in range(12)
    ]
    ks += [
        (K_ELEMENTWISE, 60.0, "aten::add", ["float", "float"], [[8192, 4096], [8192, 4096]])
        for _ in range(12)
    ]
    return _gpu_bound(ks)


def tf32_gemms_with_shapes() -> SyntheticTrace:
    return _tf32_gemms("aten::mm", [[8192, 4096], [4096, 4096]])


def tf32_gemms_inside_cudnn_rnn() -> SyntheticTrace:
    # cuDNN's LSTM runs its GEMMs inside one op whose recorded inputs do not give their shapes
    return _tf32_gemms("aten::_cudnn_rnn", [[128, 256, 1024], [4096, 1024]])


CASES += [
    RuleCase(
        "GA1103-fires-on-tf32-gemms-with-shapes",
        "GA1103",
        tf32_gemms_with_shapes,
        expect=Expect(fires=True, min_severity="high", message_contains=("TF32",)),
    ),
    RuleCase(
        "GA1103-quiet-on-opaque-tf32-gemms", "GA1103", tf32_gemms_inside_cudnn_rnn, expect=Expect(fires=False)
    ),
]
