"""StepEventLog (gpuadvisor/capture/between.py) on its own: which events end an evaluation pass."""

from __future__ import annotations

from gpuadvisor.capture.between import StepEventLog


def _log(trained: bool = True) -> StepEventLog:
    return StepEventLog(current_step=lambda: None, trained=lambda: trained, optimizer_built=lambda: True)


def test_a_gc_pass_inside_an_evaluation_does_not_split_it() -> None:
    # Real case (nanoGPT --compile=True on an H200): full collections ran during the compiled model's
    # first evaluation call and cut the one evaluation at iteration 0 into a 1-call and a 399-call pass.
    log = _log()
    for _ in range(3):
        log.model_call(evaluating=True)
    log.add("gc", 0.0, 0.1, {"generation": 2, "collected": 10})
    for _ in range(2):
        log.model_call(evaluating=True)
    log.model_call(evaluating=False)
    evals = [e for e in log.events if e["kind"] == "evaluation"]
    assert [e["forward_calls"] for e in evals] == [5]
    assert [e["kind"] for e in log.events] == ["gc", "evaluation"]


def test_a_checkpoint_ends_an_evaluation_pass() -> None:
    log = _log()
    log.model_call(evaluating=True)
    log.model_call(evaluating=True)
    log.add("checkpoint", 0.0, 0.5, {"bytes": 1})
    log.model_call(evaluating=True)
    log.finish()
    assert [(e["kind"], e.get("forward_calls")) for e in log.events] == [
        ("evaluation", 2), ("checkpoint", None), ("evaluation", 1)]


def test_an_evaluation_before_the_first_optimizer_step_is_kept_once_training_starts() -> None:
    state = {"trained": False}
    log = StepEventLog(current_step=lambda: None, trained=lambda: state["trained"], optimizer_built=lambda: True)
    for _ in range(4):
        log.model_call(evaluating=True)
    log.model_call(evaluating=False)  # the first training forward ends the pass, held
    assert log.events == []
    state["trained"] = True
    log.optimizer_step()
    assert [(e["kind"], e["forward_calls"]) for e in log.events] == [("evaluation", 4)]


class _FakeStorage:
    def __init__(self, ptr: int, nbytes: int) -> None:
        self.ptr, self.size = ptr, nbytes

    def data_ptr(self) -> int:
        return self.ptr

    def nbytes(self) -> int:
        return self.size


class _FakeTensor:
    """Stands in for a torch.Tensor (no CUDA here): `is_cuda` and its storage."""

    def __init__(self, ptr: int, nbytes: int, cuda: bool = True) -> None:
        self.is_cuda = cuda
        self._storage = _FakeStorage(ptr, nbytes)

    def untyped_storage(self) -> _FakeStorage:
        return self._storage


def test_a_save_records_the_bytes_of_its_distinct_gpu_tensors() -> None:
    """What a background save would copy to pinned memory: each GPU storage once (a tied weight is one
    storage), CPU tensors and plain values left out."""
    from gpuadvisor.capture.hooks import _device_bytes

    shared = _FakeTensor(1, 4000)
    state = {
        "model": {"wte": shared, "lm_head": shared, "bias": _FakeTensor(2, 500)},
        "optimizer": {"state": {0: {"exp_avg": _FakeTensor(3, 4000), "step": 12}}, "param_groups": [{"lr": 3e-4}]},
        "cpu_copy": _FakeTensor(4, 9999, cuda=False),
        "step": 100,
    }
    assert _device_bytes(state) == 4000 + 500 + 4000
    assert _device_bytes({"step": 1}) is None
