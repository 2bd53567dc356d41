"""The step model built from SYNTHETIC traces (tests/synth.py): idle attribution, host waits, the
replayed baseline against the trace, and each remedy's transformation, with hand-computed numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.remedies import RemedyId
from gpuadvisor.stepmodel import StepModel, build_step_model
from gpuadvisor.stepmodel import build as sb
from gpuadvisor.stepmodel.predict import combine_findings, predict, predict_combined
from gpuadvisor.trace.load import load_trace
from tests.synth import K_ADAM, K_ELEMENTWISE, K_MULTI_TENSOR, K_NVJET_BF16, SyntheticTrace, training_loop

STEP = 1000.0


def model_of(st: SyntheticTrace, tmp_path: Path) -> StepModel:
    return build_step_model(load_trace(st.write(tmp_path / "t.json.gz")))


def _gpu_bound(n: int = 6, *, read_loop: int = 0) -> SyntheticTrace:
    """Steps of 1 ms: the host launches a 600 us GEMM and a 200 us kernel at the start, reads the loss
    (`.item()` waits for the GPU, until ~825), optionally runs a loop of `read_loop` scalar reads
    (10 us each, 20 us apart), then starts the next step (with 8 reads, at 1 ms; without, 30 us after
    the loss read)."""
    st = SyntheticTrace()
    step = STEP if read_loop else 850.0
    for i in range(n):
        t0 = i * step
        st.add_step(i + 1, cpu_start=t0, cpu_dur=step, gpu_dur=step)
        st.add_kernel(K_NVJET_BF16, ts=t0 + 20, dur=600, launch_ts=t0 + 5, launch_dur=4, op="aten::mm")
        st.add_kernel(K_ELEMENTWISE, ts=t0 + 620, dur=200, launch_ts=t0 + 10, launch_dur=4, op="aten::add")
        st.add_item_read(ts=t0 + 20, dur=805, copy_ts=t0 + 821)  # waits until the GPU is done (~822)
        t = t0 + 830
        for _ in range(read_loop):
            st.add_item_read(ts=t, dur=10, copy_ts=t + 7)
            t += 20
        st.add_optimizer_step(t - 1 if read_loop else t0 + 827, 2)
    return st


def test_replay_reproduces_a_gpu_bound_trace(tmp_path: Path) -> None:
    m = model_of(_gpu_bound(), tmp_path)
    assert m.window.count == 5  # 6 steps, the first is the outlier
    assert m.replay_fit == pytest.approx(1.0, abs=0.01)
    assert m.baseline.period_us == pytest.approx(850.0, abs=10.0)


def test_a_read_after_the_gpu_is_done_costs_nothing(tmp_path: Path) -> None:
    # the loss read waits for work that is queued anyway; what it costs is the refill bubble after it:
    # the GPU finishes at 820, the host starts the next step at 850 and its first kernel runs at ~866.
    # Without the read the host queues the next step early and the GPU runs its 800 us back to back.
    m = model_of(_gpu_bound(), tmp_path)
    waits = m.waits(sb.SCALAR_READ)
    assert len(waits) == 5
    pred = predict(m, RemedyId.REMOVE_HOST_SYNCS, kinds=("scalar_read",))
    assert pred.predicted_step_ms * 1000 == pytest.approx(800.0, abs=2.0)
    assert pred.recovered_fraction == pytest.approx(1 - 800 / 849, abs=0.01)


def test_a_read_loop_is_charged_its_span_and_vectorizing_it_recovers_it(tmp_path: Path) -> None:
    # 8 reads 20 us apart after the GPU finished: a loop spanning ~150 us of the 1000 us step; the next
    # step's GPU work starts only after it (the GPU idles across it)
    m = model_of(_gpu_bound(read_loop=8), tmp_path)
    assert m.read_spans.count > 0
    spans = sorted((m.read_spans.ends - m.read_spans.starts).tolist())
    # each step: the loss read (805 us, it waited for the GPU: not part of a loop) and one loop span of
    # 8 reads of 10 us, 20 us apart
    assert spans.count(pytest.approx(150.0, abs=1.0)) == 6
    assert spans.count(pytest.approx(805.0, abs=1.0)) == 6
    pred = predict(m, RemedyId.REMOVE_HOST_SYNCS, kinds=("scalar_read",))
    # without the reads the GPU runs its 800 us of kernels nearly back to back (~9 us of launch latency
    # per step remains): the loop's 150 us and the refill bubble after the loss read are recovered
    assert pred.predicted_step_ms * 1000 == pytest.approx(809.0, abs=3.0)
    assert m.idle_share(sb.IDLE_SYNC, sb.SCALAR_READ) > 0.1


def _data_bound(
    workers_wait: float = 600.0, *, multiprocessing: bool = False, extra: tuple[float, ...] = ()
) -> SyntheticTrace:
    """Steps of 1 ms: the host waits `workers_wait` us (+ `extra[i]` in step i) in DataLoader __next__
    (a worker loader's iterator with `multiprocessing`), then launches 300 us of GPU work and ends with
    a loss read."""
    st = SyntheticTrace()
    for i in range(6):
        t0 = i * STEP
        st.add_step(i + 1, cpu_start=t0, cpu_dur=STEP, gpu_dur=STEP)
        if extra:
            workers_wait = 600.0 + extra[i]
        st.add_dataloader_wait(t0 + 10, workers_wait, multiprocessing=multiprocessing)
        k0 = t0 + 10 + workers_wait + 20
        st.add_kernel(K_ELEMENTWISE, ts=k0, dur=300, launch_ts=k0 - 10, launch_dur=4)
        st.add_item_read(ts=k0 - 4, dur=306, copy_ts=k0 + 300)
        st.add_optimizer_step(k0 + 310, 5)
    return st


def test_dataloader_wait_is_data_loading_idle_and_workers_remove_it(tmp_path: Path) -> None:
    m = model_of(_data_bound(), tmp_path)
    assert m.idle_share(sb.IDLE_DATA) == pytest.approx(0.6, abs=0.01)
    pred = predict(m, RemedyId.DATALOADER_WORKERS, workers=8, current_workers=0)
    # the wait shrinks to the 150 us hand-over; 8 workers produce a batch every 600/8 = 75 us
    assert pred.predicted_step_ms * 1000 == pytest.approx(1000 - 600 + 150, abs=5)
    # one worker cannot beat its own production time: the floor is 600 us per step
    one = predict(m, RemedyId.DATALOADER_WORKERS, workers=1, current_workers=0)
    assert one.predicted_step_ms * 1000 == pytest.approx(600.0, abs=1.0)


def test_larger_batch_keeps_underfilled_short_kernels_and_scales_full_ones(tmp_path: Path) -> None:
    st = SyntheticTrace()
    for i in range(6):
        t0 = i * STEP
        st.add_step(i + 1, cpu_start=t0, cpu_dur=STEP, gpu_dur=STEP)
        # 8 blocks on 132 SMs, 10 us: latency-bound, keeps its time until 16x the batch fills the SMs
        st.add_kernel(K_ELEMENTWISE, ts=t0 + 20, dur=10, grid=(8, 1, 1), launch_ts=t0 + 10, launch_dur=2)
        # a full-grid kernel of 100 us grows with the batch
        st.add_kernel(K_ELEMENTWISE, ts=t0 + 40, dur=100, grid=(528, 1, 1), launch_ts=t0 + 30, launch_dur=2)
    m = model_of(st, tmp_path)
    base = m.baseline.period_us
    assert base == pytest.approx(1000.0, abs=5)  # host-paced: the GPU works 110 us of each ms
    x4 = predict(m, RemedyId.LARGER_BATCH, multiplier=4.0)
    # 4x: 10 us + 400 us of GPU work still fits the 1 ms host step: 4x the samples per step
    assert x4.speedup == pytest.approx(4.0, rel=0.01)
    x16 = predict(m, RemedyId.LARGER_BATCH, multiplier=16.0)
    # 16x: 10 us x max(1, 16 x 8/132) + 1600 us -> the GPU (~1.6 ms) sets the pace
    assert x16.predicted_step_ms * 1000 == pytest.approx(10 + 1600, rel=0.02)
    assert x16.batch_multiplier == 16.0


def _per_tensor_update(python_before_us: float = 0.0) -> SyntheticTrace:
    """SYNTHETIC steps of (2000 + python_before_us) us: a 300 us kernel, then Optimizer.step: after
    `python_before_us` of Python without launches, 150 launches of 2 us kernels 10 us apart (a
    host-bound per-tensor update)."""
    st = SyntheticTrace()
    step = 2000.0 + python_before_us
    for i in range(6):
        t0 = i * step
        st.add_step(i + 1, cpu_start=t0, cpu_dur=step, gpu_dur=step)
        st.add_kernel(K_ELEMENTWISE, ts=t0 + 20, dur=300, grid=(1024, 1, 1), launch_ts=t0 + 5, launch_dur=4)
        st.add_optimizer_step(t0 + 400, 1500 + python_before_us)
        t = t0 + 410 + python_before_us
        for _ in range(150):
            st.add_kernel(K_ADAM, ts=t + 4, dur=2, grid=(8, 1, 1), launch_ts=t, launch_dur=3)
            t += 10
    return st


def test_fused_optimizer_replaces_per_tensor_host_time(tmp_path: Path) -> None:
    m = model_of(_per_tensor_update(), tmp_path)
    pred = predict(m, RemedyId.FUSED_OPTIMIZER, per_tensor=True, param_tensors=50)
    # the update's host time (~1.5 ms) becomes 60 + 0.5 x 50 = 85 us; the rest of the host step stays
    assert pred.predicted_step_ms * 1000 == pytest.approx(2000 - 1500 + 85, rel=0.05)


def test_fused_optimizer_keeps_the_python_before_the_first_launch(tmp_path: Path) -> None:
    # the same update after 600 us of Python inside Optimizer.step (building the parameter lists, which a
    # fused update does too): only the launches' stretch becomes the fused cost
    m = model_of(_per_tensor_update(python_before_us=600.0), tmp_path)
    pred = predict(m, RemedyId.FUSED_OPTIMIZER, per_tensor=True, param_tensors=50)
    # 1.49 ms from the first launch to the end of the last becomes 85 us; the 600 us before stay
    assert pred.predicted_step_ms * 1000 == pytest.approx(2600 - 1493 + 85, rel=0.05)


def test_a_closure_inside_the_optimizer_step_is_the_models(tmp_path: Path) -> None:
    # optimizer.step(closure), as Lightning runs every step: the forward and the backward run inside the
    # Optimizer.step span. They are the model's: the optimizer's span starts after the backward, its
    # kernels are the update's 5, and fusing the update saves at most its 100 us, not the closure's
    # 1.3 ms (before: 78% claimed on the Lightning autoencoder, 6% measured)
    from gpuadvisor.stepmodel import transforms as tf

    m = model_of(training_loop(closure=True), tmp_path)
    assert m.model_spans is not None
    assert float(m.optimizer_spans.covered(m.model_spans.starts, m.model_spans.ends).sum()) == 0.0
    w = m.window_ops
    assert int(w["in_optimizer"].astype(bool).sum()) == 5 * m.window.count
    plain = model_of(training_loop(), tmp_path)
    assert m.baseline.period_us == pytest.approx(plain.baseline.period_us, rel=0.03)
    pred = predict(m, RemedyId.FUSED_OPTIMIZER, per_tensor=False, param_tensors=5)
    saved_us = (m.baseline_step_ms - pred.predicted_step_ms) * 1000
    assert 0.0 <= saved_us <= 100.0
    # the closure's events are not the optimizer's
    assert int(m.program.ev_in_optimizer.sum()) <= 5 * m.program.steps + m.program.steps
    assert tf.optimizer_update_events(m.program)[1].sum() == 5 * m.program.steps


def test_copy_remedies_compose_and_their_group_prediction_is_not_their_sum(tmp_path: Path) -> None:
    from tests.rules.cases.ga1_transfers import _trace

    m = model_of(_trace("Pageable", 1050, shapes=True), tmp_path)
    pin = predict(m, RemedyId.PINNED_ASYNC_COPIES)
    fetch = predict(m, RemedyId.PREFETCH_COPIES)
    rows = tuple(int(i) for i in m.ops[(m.ops["kind"] == "copy") & (m.ops["step"] >= 0)].index)
    narrow = predict(m, RemedyId.UINT8_INPUTS, rows=rows)
    both = predict_combined(
        m,
        [
            (RemedyId.UINT8_INPUTS, {"rows": rows}),
            (RemedyId.PINNED_ASYNC_COPIES, {}),
            (RemedyId.PREFETCH_COPIES, {}),
        ],
    )
    assert 0 < pin.recovered_fraction < fetch.recovered_fraction <= both.recovered_fraction
    assert (
        both.recovered_fraction
        < pin.recovered_fraction + fetch.recovered_fraction + narrow.recovered_fraction
    )
    # prefetched copies are off the critical path: the step is the compute, 7850 + 900 us, plus the loss
    # read and the host's launches (~0.2 ms), of the 10 ms step
    assert fetch.predicted_step_ms == pytest.approx(8.96, abs=0.1)


def test_combined_prediction_leaves_the_batch_out(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from gpuadvisor.model import Severity

    m = model_of(_data_bound(), tmp_path)
    dl = predict(m, RemedyId.DATALOADER_WORKERS, workers=8, current_workers=0)
    batch = predict(m, RemedyId.LARGER_BATCH, multiplier=4.0)
    findings = [
        SimpleNamespace(rule="GA301", severity=Severity.HIGH, prediction=dl.to_dict()),
        SimpleNamespace(rule="GA401", severity=Severity.HIGH, prediction=batch.to_dict()),
        SimpleNamespace(rule="GA999", severity=Severity.LOW, prediction=dl.to_dict()),
    ]
    combined, rules = combine_findings(m, findings)
    assert rules == ["GA301"]
    assert combined is not None and combined.speedup == pytest.approx(dl.speedup)


def test_data_handoff_fraction_from_the_capture_and_from_the_trace(tmp_path: Path) -> None:
    m = model_of(_data_bound(), tmp_path)
    spans, window = m.data_spans, m.window
    # a single-process loader: the wait is the loading itself
    assert sb.data_handoff_fraction(spans, window, {}) == 0.0
    loader = {"num_workers": 2, "iterations": 40, "batches_ready": 30, "batches_waited": 10,
              "next_ready_s": 0.030, "next_waited_s": 0.070}
    # ready batches took 1 ms each: 40 batches x 1 ms of the 100 ms spent in __next__ were the hand-off
    assert sb.data_handoff_fraction(spans, window, {"dataloaders": [loader]}) == pytest.approx(0.4)
    assert sb.data_handoff_fraction(spans, window, {"dataloaders": [dict(loader, num_workers=0)]}) == 0.0
    # calls made outside the profiler decide when there are enough of them (here 2 ms per ready batch)
    outside = dict(loader, batches_ready_unprofiled=2, batches_waited_unprofiled=3,
                   next_ready_unprofiled_s=0.004, next_waited_unprofiled_s=0.016)
    assert sb.data_handoff_fraction(spans, window, {"dataloaders": [outside]}) == pytest.approx(0.5)
    thin = dict(outside, batches_ready_unprofiled=1, batches_waited_unprofiled=1)
    assert sb.data_handoff_fraction(spans, window, {"dataloaders": [thin]}) == pytest.approx(0.4)
    # too few timed batches: the trace decides (here a single-process iterator)
    few = dict(loader, batches_ready=1, batches_waited=0)
    assert sb.data_handoff_fraction(spans, window, {"dataloaders": [few]}) == 0.0
    # a worker loader's iterator in a raw trace: the shortest wait is the hand-off of every batch
    mp = model_of(_data_bound(multiprocessing=True, extra=(0.0, 0.0, 300.0, 0.0, 0.0, 0.0)), tmp_path)
    waits = mp.data_spans.ends - mp.data_spans.starts
    inside = mp.window.step_index(mp.data_spans.starts) >= 0
    expected = 600.0 * inside.sum() / waits[inside].sum()
    assert mp.data_handoff_fraction == pytest.approx(expected)
    assert 0.8 < mp.data_handoff_fraction < 1.0


def test_worker_handoff_neither_shrinks_with_workers_nor_grows_with_the_batch(tmp_path: Path) -> None:
    single = model_of(_data_bound(), tmp_path)
    workers = model_of(_data_bound(multiprocessing=True), tmp_path)
    assert workers.data_handoff_fraction == pytest.approx(1.0)
    # more workers: a single-process loader's 600 us wait becomes a hand-off; a loader whose workers
    # already had every batch ready keeps its wait
    assert predict(single, RemedyId.DATALOADER_WORKERS, workers=8, current_workers=0).speedup > 1.5
    assert predict(workers, RemedyId.DATALOADER_WORKERS, workers=8, current_workers=2).speedup == pytest.approx(1.0)
    # a larger batch: loading in the loop grows with the samples, the hand-off does not
    big_single = predict(single, RemedyId.LARGER_BATCH, multiplier=4.0)
    big_workers = predict(workers, RemedyId.LARGER_BATCH, multiplier=4.0)
    assert big_single.predicted_step_ms > 4 * 0.6
    assert big_workers.predicted_step_ms < 2.0
    assert big_workers.speedup > 1.9 * big_single.speedup  # 4 / 1.9 ms against 4 / 3.7 ms


def test_model_spans_hold_the_forward_and_backward_not_the_batch_building(tmp_path: Path) -> None:
    m = model_of(training_loop(), tmp_path)
    spans = m.model_spans
    assert spans is not None and spans.count > 0
    base = 1_000_000.0
    step = 3400.0
    t0 = base + 2 * step
    # the batch-building op shares the forward's first sequence number but runs 2 ms earlier
    assert spans.covered(t0, t0 + 1990.0) == pytest.approx(0.0)
    # the forward: from its first op (t0 + 2000) to its last op's end (t0 + 2578)
    assert spans.covered(t0 + 2000.0, t0 + 2578.0) == pytest.approx(578.0, abs=1.0)
    # the backward: 20 engine functions 30 us apart, from the first start to the last end
    assert spans.covered(t0 + 2600.0, t0 + 3300.0) == pytest.approx(590.0, abs=1.0)


def test_compiling_leaves_the_loops_own_host_work(tmp_path: Path) -> None:
    # CUDA graphs remove the model's host work between launches, not the 2 ms of batch building: the
    # step cannot drop below it
    m = model_of(training_loop(), tmp_path)
    assert m.baseline.period_us == pytest.approx(3400.0, rel=0.03)
    pred = predict(m, RemedyId.TORCH_COMPILE)
    assert 2000.0 < pred.predicted_step_ms * 1000 < 2300.0
    # a trace that does not show where the model runs falls back to treating all host work outside the
    # optimizer and the DataLoader as the model's: the batch building then shrinks too
    blind = model_of(training_loop(engine=False), tmp_path)
    assert blind.model_spans is None
    assert predict(blind, RemedyId.TORCH_COMPILE).predicted_step_ms * 1000 < 1000.0


def test_graphs_copy_each_new_input_before_a_replay(tmp_path: Path) -> None:
    # a batch of 20 tensors moved to the GPU each step: CUDA graph trees copy each into the graph's
    # static input buffer before every replay (graph_input_copy_us each, plain-run microseconds)
    from gpuadvisor.stepmodel import transforms as tf

    m = model_of(training_loop(batch_bytes=1 << 20, batch_copies=20), tmp_path)
    assert tf.graph_inputs_per_step(m, m.program) == pytest.approx(20.0)
    with_copies = predict(m, RemedyId.TORCH_COMPILE)
    launches_only = predict(m, RemedyId.TORCH_COMPILE, input_copies=False)
    extra_us = (with_copies.predicted_step_ms - launches_only.predicted_step_ms) * 1000
    assert extra_us == pytest.approx(20 * tf.CONSTANTS.graph_input_copy_us, rel=0.05)
    assert any("20 tensors moved to the GPU" in n for n in with_copies.notes)
    # one input: a small cost, no note
    one = model_of(training_loop(batch_bytes=1 << 20), tmp_path)
    assert tf.graph_inputs_per_step(one, one.program) == pytest.approx(1.0)
    assert not any("tensors moved to the GPU" in n for n in predict(one, RemedyId.TORCH_COMPILE).notes)


def _read_first_gpu_bound(n: int = 6, inputs: int = 10) -> SyntheticTrace:
    """SYNTHETIC steps of 1000 us shaped like dlrm's: each starts by reading the previous step's result
    (`.item()` waits for its long kernel, until +57 us), copies `inputs` pinned tensors to the device
    (10 us apart), launches 10 short kernels 20 us apart and one 582 us kernel at +470, and leaves the
    host free for the rest of the step while that kernel runs."""
    st = SyntheticTrace()
    for i in range(n):
        t0 = i * STEP
        st.add_step(i + 1, cpu_start=t0, cpu_dur=STEP, gpu_dur=STEP)
        st.add_item_read(ts=t0, dur=60.0, copy_ts=t0 + 58.0)
        for k in range(inputs):
            at = t0 + 70.0 + 10.0 * k
            st.add_copy("HtoD", "Pinned", 1 << 16, ts=at + 6.0, dur=3.0, launch_ts=at, launch_dur=4.0)
        for j in range(10):
            ts = t0 + 280.0 + 20.0 * j
            st.add_kernel(K_ELEMENTWISE, ts=ts + 6.0, dur=5.0, launch_ts=ts, launch_dur=4.0, op="aten::mul")
        st.add_kernel(K_NVJET_BF16, ts=t0 + 475.0, dur=582.0, launch_ts=t0 + 470.0, launch_dur=4.0, op="aten::mm")
    return st


def test_the_graphs_input_copies_delay_the_gpu_work_after_them(tmp_path: Path) -> None:
    # The graphs copy their inputs on the host just before the first replay of the step, after the read
    # that waited for the GPU: the GPU waits for those copies. Placed at the end of the block instead,
    # the same host time would overlap the long kernel and cost nothing.
    from gpuadvisor.stepmodel import transforms as tf
    from gpuadvisor.stepmodel.replay import replay

    m = model_of(_read_first_gpu_bound(inputs=10), tmp_path)
    assert tf.graph_inputs_per_step(m, m.program) == pytest.approx(10.0)
    with_copies = predict(m, RemedyId.CUDA_GRAPHS)
    launches_only = predict(m, RemedyId.CUDA_GRAPHS, input_copies=False)
    cost_us = tf.CONSTANTS.graph_input_copy_us * 10  # 360 us, shorter than the long kernel
    extra_us = (with_copies.predicted_step_ms - launches_only.predicted_step_ms) * 1000
    assert extra_us == pytest.approx(cost_us, rel=0.1)
    # one step's copies at the block's tail (after the long kernel's launch) hide behind that kernel
    program = tf.cuda_graphs(m, m.program.copy(), input_copies=False)
    at_tail = program.copy()
    at_tail.tail_fixed += cost_us
    assert replay(at_tail, m.host_scale).period_us == pytest.approx(
        replay(program, m.host_scale).period_us, abs=5.0
    )


@pytest.mark.parametrize(("cls", "factor"), [("Adam", 0.37), ("AdamW", 0.33), ("SGD", 0.63), ("Adagrad", 0.75)])
def test_foreach_to_fused_gpu_time_by_optimizer_class(tmp_path: Path, cls: str, factor: float) -> None:
    # a GPU-bound step whose foreach update (3 multi-tensor kernels, 3 ms) dominates: fused=True does
    # the update in one pass over parameters, gradients and state (the class's ratio of tensor passes)
    st = SyntheticTrace()
    for i in range(6):
        t0 = i * 4000.0
        st.add_step(i + 1, cpu_start=t0, cpu_dur=4000.0, gpu_dur=4000.0)
        st.add_kernel(K_NVJET_BF16, ts=t0 + 20, dur=900, launch_ts=t0 + 5, launch_dur=4, op="aten::mm")
        st.add_optimizer_step(t0 + 30, 40, name=f"Optimizer.step#{cls}.step")
        for j in range(3):
            st.add_kernel(K_MULTI_TENSOR, ts=t0 + 920 + 1000 * j, dur=1000, launch_ts=t0 + 32 + 10 * j, launch_dur=4)
        st.add_sync(t0 + 70, 3840, name="cudaDeviceSynchronize")
    m = model_of(st, tmp_path)
    assert m.optimizer_class == cls
    pred = predict(m, RemedyId.FUSED_OPTIMIZER, per_tensor=False)
    # 900 us of model work stays; 3 ms of update becomes factor x 3 ms
    assert pred.predicted_step_ms * 1000 == pytest.approx(4000 - 3000 * (1 - factor), rel=0.05)


def test_batch_preparation_in_the_loop_moves_to_workers(tmp_path: Path) -> None:
    from gpuadvisor.stepmodel import transforms as tf

    m = model_of(training_loop(batch_bytes=1 << 20), tmp_path)
    mask = tf.loop_preparation_mask(m, m.program)
    # one stretch per step: the 2 ms of preparation before the batch's copy (the forward, backward and
    # optimizer gaps are the model's or far shorter)
    assert int(mask.sum()) == m.program.steps
    assert float(tf.loop_work_us(m.program)[mask].sum()) / m.program.steps == pytest.approx(2000.0, rel=0.05)
    pred = predict(m, RemedyId.DATALOADER_WORKERS, workers=8, loop_preparation=True)
    # 3.4 ms -> the model's 1.4 ms + a 150 us hand-off (8 workers make a batch every 250 us)
    assert pred.predicted_step_ms * 1000 == pytest.approx(1400.0 + 150.0, rel=0.06)
    one = predict(m, RemedyId.DATALOADER_WORKERS, workers=1, loop_preparation=True)
    assert one.predicted_step_ms * 1000 >= 2000.0 - 1.0  # one worker: its own 2 ms per batch
    # no copy of a batch after the work: not input preparation (logging, metrics...), nothing moved
    plain = model_of(training_loop(), tmp_path)
    assert not tf.loop_preparation_mask(plain, plain.program).any()
    assert predict(plain, RemedyId.DATALOADER_WORKERS, workers=8, loop_preparation=True).speedup == 1.0


def test_no_cuda_graphs_across_a_data_dependent_wait_in_the_model(tmp_path: Path) -> None:
    m = model_of(training_loop(nonzero=True), tmp_path)
    graphs = predict(m, RemedyId.CUDA_GRAPHS)
    assert graphs.predicted_step_ms == pytest.approx(m.baseline_step_ms, rel=1e-6)
    assert any("data-dependent" in n for n in graphs.notes)
    # with the shapes made static first, the graphs apply
    both = predict_combined(m, [(RemedyId.STATIC_SHAPES, {}), (RemedyId.CUDA_GRAPHS, {})])
    assert both.predicted_step_ms < 0.9 * m.baseline_step_ms


def _finding(rule: str, category: str, pred: Any) -> Any:
    from gpuadvisor.model import Category, Finding, Severity

    return Finding(
        rule=rule,
        name=rule.lower(),
        category=Category(category),
        severity=Severity.HIGH,
        impact=pred.recovered_fraction,
        title=f"{rule} finding",
        message=f"{rule} message.",
        evidence={},
        recommendation="",
        remedy=pred.remedy,
        prediction=pred.to_dict(),
    )


def test_findings_of_one_problem_share_a_prediction_and_rank_by_it(tmp_path: Path) -> None:
    from gpuadvisor.model import sort_findings
    from gpuadvisor.stepmodel.predict import group_findings

    # two remedies that pay off only together: CUDA graphs need the data-dependent wait gone first
    m = model_of(training_loop(nonzero=True), tmp_path)
    graphs = predict(m, RemedyId.CUDA_GRAPHS)
    static = predict(m, RemedyId.STATIC_SHAPES)
    both = predict_combined(m, [(RemedyId.CUDA_GRAPHS, {}), (RemedyId.STATIC_SHAPES, {})])
    parts = max(graphs.recovered_fraction, static.recovered_fraction)
    assert both.recovered_fraction > parts + 0.1
    a = _finding("GA501", "launch_overhead", graphs)
    b = _finding("GA502", "launch_overhead", static)
    # a finding of another problem whose impact lies between the parts and the whole
    other = replace_impact(_finding("GA999", "small_batch", graphs), (parts + both.recovered_fraction) / 2)
    grouped = group_findings(m, [other, a, b])
    ga501, ga502 = grouped[1], grouped[2]
    assert ga501.group == ga502.group == "launch_overhead" and grouped[0].group is None
    assert ga501.prediction["group_recovered_fraction"] == pytest.approx(both.recovered_fraction, abs=1e-4)
    assert "their impacts do not add up" in ga501.message
    assert (ga501.impact, ga502.impact) == (a.impact, b.impact)  # each keeps its own impact
    # the problem ranks by its combined impact: both of its findings come before GA999
    assert [f.rule for f in sort_findings(grouped)][2] == "GA999"
    assert sort_findings([other, a, b])[0].rule == "GA999"  # ungrouped, it would lead
    # a lone finding of a grouped category gets no group
    assert group_findings(m, [a])[0].group is None


def replace_impact(f: Any, impact: float) -> Any:
    from dataclasses import replace

    return replace(f, impact=impact)


def _staging_copies(n: int = 6) -> SyntheticTrace:
    """Steps of 1.6 ms: ten pageable host-to-device copies whose calls last 100 us each (the driver
    stages the bytes; each copy runs after its call returned, so the host did not wait for it), then
    thirty 10 us kernels launched with 5 us calls."""
    st = SyntheticTrace()
    for i in range(n):
        t0 = i * 1600.0
        st.add_step(i + 1, cpu_start=t0, cpu_dur=1600.0, gpu_dur=1600.0)
        t = t0 + 10
        for _ in range(10):
            st.add_copy("HtoD", "Pageable", 1 << 20, ts=t + 101, dur=40, launch_ts=t, launch_dur=100)
            t += 110
        for _ in range(30):
            st.add_kernel(K_ELEMENTWISE, ts=t + 10, dur=10, launch_ts=t, launch_dur=5, op="aten::add")
            t += 15
    return st


def test_a_long_copy_call_with_the_queue_empty_is_host_work_not_back_pressure(tmp_path: Path) -> None:
    # dlrm-planted's pageable copies (90-120 us calls, 1 operation in flight) were read as launches held
    # by a full queue: queue depth 8, their time replaced by a typical call. They are host work the
    # profiler barely inflates: kept, and not scaled by the profiler correction.
    from gpuadvisor.stepmodel import replay as rp

    m = model_of(_staging_copies(), tmp_path)
    copies = m.host[m.host["name"] == "cudaMemcpyAsync"]
    assert len(copies) >= 40 and not copies["backpressure"].astype(bool).any()
    assert int(copies["in_flight"].max()) <= 2
    assert (m.facts.queue_depth, m.facts.queue_depth_observed) == (1024, False)
    prog = m.program
    staged = prog.ev_fixed[prog.ev_name == "cudaMemcpyAsync"]
    assert staged == pytest.approx(100.0 - m.facts.launch_call_us, abs=1.0)
    # halving the host work (the profiler correction) leaves the staging as it is
    full, half = rp.replay(prog, 1.0).host_period_us, rp.replay(prog, 0.5).host_period_us
    scaled = rp.host_work_per_step(prog)
    assert full - half == pytest.approx(0.5 * scaled, rel=0.05)
    assert half > 10 * (100.0 - m.facts.launch_call_us)
    # pinned non_blocking copies stage nothing: the remedy removes the staging
    # (host: 10 x 15 us + 30 x 15 us; GPU: 10 x 40 us + 30 x 10 us, both about 0.7 ms a step)
    pred = predict(m, RemedyId.PINNED_ASYNC_COPIES, min_bytes=0)
    assert m.baseline_step_ms == pytest.approx(1.6, abs=0.05)
    assert pred.predicted_step_ms < 0.9


def test_launches_held_with_the_queue_full_set_the_queue_depth(tmp_path: Path) -> None:
    # a GPU-bound loop: 300 launches a step of 10 us kernels; from the 100th on, each launch call waits
    # 60 us (over 10x the usual 5 us) with about a hundred kernels queued behind it
    st = SyntheticTrace()
    t_gpu = 0.0
    for i in range(4):
        t0 = i * 3000.0
        st.add_step(i + 1, cpu_start=t0, cpu_dur=3000.0, gpu_dur=3000.0)
        t = t0
        for j in range(300):
            held = j >= 100 and i > 0
            dur = 60.0 if held else 5.0
            t_gpu = max(t_gpu, t + 6.0)
            st.add_kernel(K_ELEMENTWISE, ts=t_gpu, dur=10.0, launch_ts=t, launch_dur=dur, op="aten::add")
            t_gpu += 10.0
            t += dur + 1.0
    m = model_of(st, tmp_path)
    held = m.host[m.host["backpressure"].astype(bool)]
    assert len(held) > 100
    assert int(held["in_flight"].min()) >= sb.BACKPRESSURE_MIN_IN_FLIGHT
    assert m.facts.queue_depth_observed and m.facts.queue_depth >= sb.BACKPRESSURE_MIN_IN_FLIGHT


def test_training_or_inference_per_loop(tmp_path: Path) -> None:
    """Issue 27: what the capture saw at run time (`settings.run_mode.kind`, the key it writes) decides
    inference (no optimizer step and no backward in the whole run); otherwise the analyzed steps do."""
    import dataclasses

    model = model_of(training_loop(4), tmp_path)  # SYNTHETIC: optimizer steps in the trace
    assert model.is_training
    assert not dataclasses.replace(model, settings={"run_mode": {"kind": "inference"}}).is_training
    assert dataclasses.replace(model, settings={"run_mode": {"kind": "training"}}).is_training
    assert dataclasses.replace(model, settings={"run_mode": {"kind": "unknown"}}).is_training
