"""Synthetic Kineto traces for tests (SHARED by every test area: keep this API stable; add, never rename).

Everything built here is labelled synthetic: the top-level key ``"gpuadvisor_synthetic": true`` (the
loader exposes it as ``TraceMeta.synthetic``) and ``"traceName": "gpuadvisor synthetic trace"``.

Times: every ``ts`` / ``dur`` you pass is in microseconds RELATIVE to the trace start; the builder adds
``SyntheticTrace.base`` (default 1_000_000 us, so no event sits at the ``ts: 0`` placeholder) when it
writes the event. Tables of the loaded model therefore hold ``base + ts``.

Example::

    from tests.synth import SyntheticTrace
    st = SyntheticTrace()                       # H100 deviceProperties, record_shapes + with_flops
    st.add_step(1, cpu_start=0, cpu_dur=900, gpu_dur=1000)      # ProfilerStep#1, CPU + GPU spans
    st.add_kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", ts=100, dur=400,
                  grid=(2, 66, 1), block=(384, 1, 1), occupancy=0.0,
                  op="aten::mm", op_input_types=["c10::BFloat16", "c10::BFloat16"], op_flops=1e12)
    st.add_copy("HtoD", "Pageable", nbytes=12 << 20, ts=10, dur=80)
    st.add_item_read(ts=600, dur=300)           # aten::_local_scalar_dense + 4-byte DtoH + sync
    st.add_dataloader_wait(ts=0, dur=50)
    path = st.write(tmp_path / "t.json.gz")     # gzip when the name ends in .gz (or gz=True)
    model = load_trace(path)

Methods return the correlation id (GPU activities) or external id (cpu ops) they created, so tests
can check the flow links. Names follow docs/trace-inputs.md (real torch 2.11 / H100/H200 spellings).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

H100_PROPERTIES: dict[str, Any] = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85_520_809_984,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}

DATALOADER_NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
DATALOADER_NEXT_MP = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"

# Real kernel names (docs/trace-inputs.md / H100 traces) for tests.
K_NVJET_BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
K_XMMA_BF16 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
K_XMMA_FFMA = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
K_SIMT_SGEMM = "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>(cutlass_80_simt_sgemm_128x64_8x5_nn_align1::Params)"
K_TENSOROP = "void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_bf16_128x128_64x3_nn_align8>(Params)"
K_ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
K_REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)"
K_ADAM = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, float*, float*)"
# a foreach (multi-tensor, not fused) optimizer kernel: torch._foreach_add_ as Kineto names it
K_MULTI_TENSOR = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 3, 2, 2>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 3, 2, 2>, std::plus<float>, float)"
K_NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
K_FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t> >(Flash_fwd_params)"


class SyntheticTrace:
    """Builder of a Kineto-shaped trace dict. See the module docstring."""

    def __init__(
        self,
        *,
        base: float = 1_000_000.0,
        device_properties: Sequence[dict[str, Any]] | None = (H100_PROPERTIES,),
        rank: int | None = None,
        world_size: int = 1,
        record_shapes: bool = True,
        with_flops: bool = True,
        with_stack: bool = False,
        pid: int = 1234,
        tid: int = 1234,
        stream: int = 7,
    ) -> None:
        self.base = float(base)
        self.pid = pid
        self.tid = tid
        self.stream = stream
        self.events: list[dict[str, Any]] = []
        self.top: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [dict(p) for p in device_properties] if device_properties else [],
            "cuda_driver_version": 13000,
            "cuda_runtime_version": 13000,
            "with_stack": with_stack,
            "record_shapes": record_shapes,
            "with_flops": with_flops,
            "baseTimeNanoseconds": 1_700_000_000_000_000_000,
            "gpuadvisor_synthetic": True,
            "traceName": "gpuadvisor synthetic trace",
        }
        if rank is not None:
            self.top["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size}
        self._next_corr = 1
        self._next_ext = 1

    # ---- raw events -------------------------------------------------------------------------------

    def _x(
        self, cat: str, name: str, ts: float, dur: float | None, args: dict[str, Any] | None, **kw: Any
    ) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": kw.get("pid", self.pid),
            "tid": kw.get("tid", self.tid),
            "ts": self.base + ts,
        }
        if dur is not None:
            ev["dur"] = dur
        if args is not None:
            ev["args"] = args
        self.events.append(ev)
        return ev

    def new_correlation(self) -> int:
        c = self._next_corr
        self._next_corr += 1
        return c

    def new_external_id(self) -> int:
        e = self._next_ext
        self._next_ext += 1
        return e

    def add_event(self, event: dict[str, Any]) -> None:
        """Append a raw event unchanged (no base offset): for malformed-input tests."""
        self.events.append(event)

    def add_annotation(self, name: str, ts: float, dur: float, *, on_gpu: bool = False) -> None:
        """A user_annotation (CPU span) or gpu_user_annotation (GPU span, on the stream's lane)."""
        if on_gpu:
            self._x(
                "gpu_user_annotation",
                name,
                ts,
                dur,
                {"External id": self.new_external_id()},
                pid=0,
                tid=self.stream,
            )
        else:
            self._x("user_annotation", name, ts, dur, {"External id": self.new_external_id()})

    def add_cpu_op(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        input_types: Sequence[str] | None = None,
        input_dims: Sequence[Sequence[int]] | None = None,
        flops: float | None = None,
        external_id: int | None = None,
        seq: int | None = None,
        tid: int | None = None,
        without_seq: bool = False,
    ) -> int:
        """A cpu_op (aten op). Returns its external id. Its autograd "Sequence number" is `seq` (default:
        the external id; none with `without_seq`: an op run with grad mode off, such as a backward
        formula's); `tid` its thread (default: the main thread)."""
        ext = external_id if external_id is not None else self.new_external_id()
        args: dict[str, Any] = {"External id": ext}
        if not without_seq:
            args.update({"Sequence number": ext if seq is None else seq, "Fwd thread id": 0})
        if input_dims is not None:
            args["Input Dims"] = [list(d) for d in input_dims]
        if input_types is not None:
            args["Input type"] = list(input_types)
        if flops is not None:
            args["flops"] = flops
        self._x("cpu_op", name, ts, dur, args, **({} if tid is None else {"tid": tid}))
        return ext

    def add_runtime(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        correlation: int | None = None,
        external_id: int | None = None,
        cat: str = "cuda_runtime",
        tid: int | None = None,
    ) -> None:
        args: dict[str, Any] = {"cbid": 211}
        if correlation is not None:
            args["correlation"] = correlation
        if external_id is not None:
            args["External id"] = external_id
        self._x(cat, name, ts, dur, args, **({} if tid is None else {"tid": tid}))

    # ---- steps and annotations ------------------------------------------------------------------

    def add_step(
        self,
        n: int,
        cpu_start: float,
        cpu_dur: float,
        gpu_dur: float | None = None,
        gpu_start: float | None = None,
    ) -> None:
        """ProfilerStep#n: CPU span [cpu_start, +cpu_dur) and, when gpu_dur is given, a GPU span
        starting at gpu_start (default cpu_start)."""
        self.add_annotation(f"ProfilerStep#{n}", cpu_start, cpu_dur)
        if gpu_dur is not None:
            self.add_annotation(
                f"ProfilerStep#{n}", cpu_start if gpu_start is None else gpu_start, gpu_dur, on_gpu=True
            )

    def add_dataloader_wait(self, ts: float, dur: float, *, multiprocessing: bool = False) -> None:
        self.add_annotation(DATALOADER_NEXT_MP if multiprocessing else DATALOADER_NEXT, ts, dur)

    def add_optimizer_step(self, ts: float, dur: float, name: str = "Optimizer.step#AdamW.step") -> None:
        self.add_annotation(name, ts, dur)

    # ---- GPU activities -------------------------------------------------------------------------

    def add_kernel(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        grid: tuple[int, int, int] = (132, 1, 1),
        block: tuple[int, int, int] = (256, 1, 1),
        occupancy: float | None = 50.0,
        blocks_per_sm: float | None = None,
        warps_per_sm: float | None = None,
        registers: int = 32,
        shared_memory: int = 0,
        stream: int | None = None,
        device: int = 0,
        launch_ts: float | None = None,
        launch_dur: float = 5.0,
        launch_name: str = "cudaLaunchKernel",
        op: str | None = None,
        op_input_types: Sequence[str] | None = None,
        op_input_dims: Sequence[Sequence[int]] | None = None,
        op_flops: float | None = None,
        op_ts: float | None = None,
        op_dur: float | None = None,
        op_seq: int | None = None,
        op_without_seq: bool = False,
        launch_tid: int | None = None,
        with_args: bool = True,
        num_sms: int = 132,
        op_external_id: int | None = None,
    ) -> int:
        """A kernel plus its cudaLaunchKernel (at launch_ts, default ts - 10) and, when `op` is given,
        a parent cpu_op around the launch (op_ts/op_dur default to launch_ts - 2 / launch_dur + 4);
        `op_external_id` instead links it to a cpu_op made before (`add_cpu_op`: one op launching
        several kernels). `blocks_per_sm` defaults to blocks / num_sms, `warps_per_sm` to that times
        warps per block. Returns the correlation id."""
        corr = self.new_correlation()
        lts = ts - 10.0 if launch_ts is None else launch_ts
        ext: int | None = op_external_id
        if op is not None and op_external_id is None:
            ext = self.add_cpu_op(
                op,
                lts - 2.0 if op_ts is None else op_ts,
                launch_dur + 4.0 if op_dur is None else op_dur,
                input_types=op_input_types,
                input_dims=op_input_dims,
                flops=op_flops,
                seq=op_seq,
                tid=launch_tid,
                without_seq=op_without_seq,
            )
        self.add_runtime(launch_name, lts, launch_dur, correlation=corr, external_id=ext, tid=launch_tid)
        blocks = grid[0] * grid[1] * grid[2]
        bps = blocks / num_sms if blocks_per_sm is None else blocks_per_sm
        threads = block[0] * block[1] * block[2]
        wps = bps * threads / 32 if warps_per_sm is None else warps_per_sm
        args: dict[str, Any] | None = None
        if with_args:
            args = {
                "queued": 0,
                "device": device,
                "context": 1,
                "stream": self.stream if stream is None else stream,
                "correlation": corr,
                "registers per thread": registers,
                "shared memory": shared_memory,
                "blocks per SM": bps,
                "warps per SM": wps,
                "grid": list(grid),
                "block": list(block),
            }
            if ext is not None:
                args["External id"] = ext
            if occupancy is not None:
                args["est. achieved occupancy %"] = occupancy
        self._x("kernel", name, ts, dur, args, pid=device, tid=self.stream if stream is None else stream)
        return corr

    def add_copy(
        self,
        direction: str,
        src: str,
        nbytes: int,
        ts: float,
        dur: float,
        *,
        dst: str | None = None,
        launch_ts: float | None = None,
        launch_dur: float = 5.0,
        launch_name: str = "cudaMemcpyAsync",
        bandwidth: bool = True,
        device: int = 0,
        stream: int | None = None,
    ) -> int:
        """`Memcpy {direction} ({src} -> {dst})`; dst defaults to Device for HtoD/DtoD, Pinned for DtoH.
        Returns the correlation id."""
        if dst is None:
            dst = "Pinned" if direction == "DtoH" else "Device"
        corr = self.new_correlation()
        lts = ts - 10.0 if launch_ts is None else launch_ts
        self.add_runtime(launch_name, lts, launch_dur, correlation=corr)
        args: dict[str, Any] = {
            "device": device,
            "context": 1,
            "stream": self.stream if stream is None else stream,
            "correlation": corr,
            "bytes": nbytes,
        }
        if bandwidth:
            args["memory bandwidth (GB/s)"] = nbytes / dur / 1e3 if dur > 0 else 0.0
        self._x(
            "gpu_memcpy",
            f"Memcpy {direction} ({src} -> {dst})",
            ts,
            dur,
            args,
            pid=device,
            tid=self.stream if stream is None else stream,
        )
        return corr

    def add_memset(self, ts: float, dur: float, nbytes: int = 1024, *, device: int = 0) -> int:
        corr = self.new_correlation()
        self.add_runtime("cudaMemsetAsync", ts - 10.0, 3.0, correlation=corr)
        self._x(
            "gpu_memset",
            "Memset (Device)",
            ts,
            dur,
            {"device": device, "context": 1, "stream": self.stream, "correlation": corr, "bytes": nbytes},
            pid=device,
            tid=self.stream,
        )
        return corr

    def add_sync(self, ts: float, dur: float, name: str = "cudaStreamSynchronize") -> None:
        """A host-blocking sync runtime call (cudaStreamSynchronize / cudaDeviceSynchronize)."""
        self.add_runtime(name, ts, dur, correlation=self.new_correlation())

    def add_item_read(self, ts: float, dur: float, *, copy_ts: float | None = None) -> int:
        """`.item()`: cpu_op aten::_local_scalar_dense [ts, ts+dur) holding a cudaMemcpyAsync, a 4-byte
        `Memcpy DtoH (Device -> Pinned)` on the GPU (at copy_ts, default ts + dur - 2, 1 us), and a
        cudaStreamSynchronize covering the rest of the wait. Returns the op's external id."""
        ext = self.add_cpu_op("aten::_local_scalar_dense", ts, dur, input_types=["float"], input_dims=[[]])
        corr = self.new_correlation()
        self.add_runtime("cudaMemcpyAsync", ts + 0.5, 1.0, correlation=corr, external_id=ext)
        cts = ts + dur - 2.0 if copy_ts is None else copy_ts
        self._x(
            "gpu_memcpy",
            "Memcpy DtoH (Device -> Pinned)",
            cts,
            1.0,
            {
                "device": 0,
                "context": 1,
                "stream": self.stream,
                "correlation": corr,
                "bytes": 4,
                "memory bandwidth (GB/s)": 0.004,
            },
            pid=0,
            tid=self.stream,
        )
        self.add_runtime(
            "cudaStreamSynchronize", ts + 2.0, dur - 2.5, correlation=self.new_correlation(), external_id=ext
        )
        return ext

    def add_python_function(self, name: str, ts: float, dur: float) -> None:
        self._x("python_function", name, ts, dur, {"Python id": 1, "Python thread": 0})

    # ---- output ---------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.top)
        d["traceEvents"] = list(self.events)
        return d

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), indent=1).encode("utf-8")

    def write(self, path: Path, gz: bool | None = None) -> Path:
        """Write the trace; gzip when gz is True or (gz None and) the name ends in .gz."""
        path = Path(path)
        data = self.to_bytes()
        if gz or (gz is None and path.name.endswith(".gz")):
            path.write_bytes(gzip.compress(data))
        else:
            path.write_bytes(data)
        return path


# ---- multi-rank helpers (H9: communication rules; added, existing behaviour unchanged) -------------

K_NCCL_OLD = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
K_NCCL_DEV = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
DDP_FORWARD = "DistributedDataParallel.forward"
NCCL_STREAM = 21  # NCCL runs on its own stream, beside the compute stream


def add_collective(
    st: SyntheticTrace,
    ts: float,
    *,
    nelems: int,
    dtype: str = "float",
    host_dur: float = 15.0,
    kernel_ts: float | None = None,
    kernel_dur: float | None = None,
    kernel_name: str = K_NCCL_DEV,
    record_param_comms: bool = True,
) -> None:
    """One all-reduce as a real NCCL-backed DDP writes it: cpu_op `c10d::allreduce_` (Input Dims
    `[[[nelems]]]`, a tensor list), `record_param_comms` inside it (args Collective name, In msg nelems,
    Group size, dtype) and, when `kernel_dur` is given, the NCCL kernel on stream NCCL_STREAM at
    `kernel_ts` (default: just after the host call) launched by cudaLaunchKernelExC."""
    ext = st.new_external_id()
    st._x(
        "cpu_op",
        "c10d::allreduce_",
        ts,
        host_dur,
        {
            "External id": ext,
            "Input Dims": [[[nelems]], [], [], [], []],
            "Input type": ["TensorList", "", "", "", ""],
        },
    )
    if record_param_comms:
        st._x(
            "cpu_op",
            "record_param_comms",
            ts + 1.0,
            host_dur - 2.0,
            {
                "External id": st.new_external_id(),
                "Input Dims": [[nelems]],
                "Input type": [dtype],
                "Collective name": "allreduce",
                "In msg nelems": nelems,
                "Out msg nelems": nelems,
                "Group size": 2,
                "dtype": "Float" if dtype == "float" else dtype,
            },
        )
    if kernel_dur is not None:
        st.add_kernel(
            kernel_name,
            ts=ts + host_dur if kernel_ts is None else kernel_ts,
            dur=kernel_dur,
            grid=(2, 1, 1),
            block=(640, 1, 1),
            occupancy=None,
            stream=NCCL_STREAM,
            launch_ts=ts + 3.0,
            launch_name="cudaLaunchKernelExC",
        )


def add_ddp_forward(st: SyntheticTrace, ts: float, dur: float) -> None:
    """The `DistributedDataParallel.forward` user_annotation DDP records around each forward."""
    st.add_annotation(DDP_FORWARD, ts, dur)


def rank_traces(world_size: int, **kwargs: Any) -> list[SyntheticTrace]:
    """One SyntheticTrace per rank with `distributedInfo` (backend nccl, rank, world_size) set.
    Every rank shares the same `base`, so one timeline can be laid out for all of them."""
    return [
        SyntheticTrace(rank=r, world_size=world_size, pid=1000 + r, tid=1000 + r, **kwargs)
        for r in range(world_size)
    ]


def write_ranks(folder: Path, traces: Sequence[SyntheticTrace]) -> Path:
    """Write `rank{N}.json.gz` per trace into `folder` (created) and return the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for st in traces:
        info = st.top.get("distributedInfo") or {}
        st.write(folder / f"rank{info.get('rank', traces.index(st))}.json.gz")
    return folder


BACKWARD_TID = 4321


def training_loop(
    n: int = 6,
    *,
    prep_us: float = 2000.0,
    nonzero: bool = False,
    engine: bool = True,
    batch_bytes: int = 0,
    batch_copies: int = 1,
    closure: bool = False,
) -> SyntheticTrace:
    """SYNTHETIC host-bound training steps shaped like a real eager loop (the autograd bookkeeping as
    Kineto records it). Each step: `prep_us` of batch preparation in Python (one CPU op that carries the
    sequence number autograd will give the next node, as real ops before the model do), a forward of 20
    ops launching 5 us kernels every 30 us, a backward of 20 autograd-engine functions on the backward
    thread (same sequence numbers), and a 100 us optimizer step. With `nonzero`, forward op 10 waits
    for a data-dependent size (`aten::nonzero`'s device-to-host copy of the count). With `batch_bytes`,
    the prepared batch is copied to the device (pinned, 20 us) just before the forward, as `batch_copies`
    tensors (copies 25 us apart). With `closure`, the step runs as `optimizer.step(closure)` does (PyTorch
    Lightning): the Optimizer.step span opens 10 us before the forward and holds the forward, the
    backward and then the 100 us update, which launches 5 kernels 20 us apart."""
    st = SyntheticTrace()
    period = prep_us + 1400.0
    seq = 1000
    for i in range(n):
        t0 = i * period
        st.add_step(i + 1, cpu_start=t0, cpu_dur=period, gpu_dur=period)
        st.add_cpu_op("aten::lift_fresh", t0 + 50.0, 5.0, seq=seq)  # batch building: not the model
        fwd0 = t0 + prep_us
        for k in range(batch_copies if batch_bytes else 0):
            at = fwd0 - 20.0 - 25.0 * k
            st.add_copy("HtoD", "Pinned", batch_bytes, ts=at, dur=20.0, launch_ts=at - 10.0)
        seqs = list(range(seq, seq + 20))
        for j, s in enumerate(seqs):
            ts = fwd0 + 30.0 * j
            if nonzero and j == 10:
                st.add_cpu_op("aten::nonzero", ts, 25.0, seq=s)
                st.add_sync(ts + 2.0, 20.0, name="cudaStreamSynchronize")
                continue
            st.add_kernel(
                K_ELEMENTWISE, ts=ts + 8.0, dur=5.0, launch_ts=ts + 2.0, launch_dur=4.0,
                op="aten::mul", op_ts=ts, op_dur=8.0, op_seq=s,
            )
        bwd0 = fwd0 + 620.0
        for j, s in enumerate(reversed(seqs)):
            ts = bwd0 + 30.0 * j
            if engine:
                st.add_cpu_op(
                    "autograd::engine::evaluate_function: MulBackward0", ts, 20.0, seq=s, tid=BACKWARD_TID
                )
            st.add_kernel(
                K_ELEMENTWISE, ts=ts + 10.0, dur=5.0, launch_ts=ts + 3.0, launch_dur=4.0,
                op="MulBackward0", op_ts=ts + 1.0, op_dur=12.0, op_seq=s, launch_tid=BACKWARD_TID,
            )
        if closure:
            st.add_optimizer_step(fwd0 - 10.0, 620.0 + 620.0 + 100.0 + 10.0)
            for k in range(5):
                at = bwd0 + 625.0 + 20.0 * k
                st.add_kernel(K_MULTI_TENSOR, ts=at + 6.0, dur=3.0, launch_ts=at, launch_dur=4.0, op="aten::_foreach_add_")
        else:
            st.add_optimizer_step(bwd0 + 620.0, 100.0)
        seq += 20
    return st
