"""The capture session's parts alone (issue 26): the step detector driven by hand through a recording
sink (no profiler, no script), and the trace export's gzip step. Synthetic: no training runs; the
objects standing in for an optimizer are plain objects (the detector only compares identities)."""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from gpuadvisor.capture.export import TraceExport, rank_file_name, rank_state_file
from gpuadvisor.capture.journal import CaptureJournal
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.capture.steps import StepDetector
from gpuadvisor.manifest import Degraded, StepDetection

OPT = StepDetection.OPTIMIZER_STEP_HOOK
DL = StepDetection.DATALOADER
FWD = StepDetection.MODULE_FORWARD


@dataclass
class Sink:
    """Records what the detector tells the session (`StepSink`)."""

    done: bool = False
    closed: bool = False
    events: list[str] = field(default_factory=list)

    def boundary(self) -> None:
        self.events.append("boundary")

    def step_signal(self, optimizer: bool = False) -> None:
        self.events.append("signal")

    def switching(self, old: StepDetection | None, new: StepDetection) -> None:
        self.events.append(f"switch {old.value if old else None} -> {new.value}")

    def switched(self) -> None:
        pass

    def window_done(self) -> bool:
        return self.done

    def window_closed(self) -> bool:
        return self.done or self.closed


def _detector(
    tmp_path: Path, *, pid: int | None = None, time_fallback_after: float = 20.0
) -> tuple[StepDetector, Sink]:
    sink = Sink()
    journal = CaptureJournal(tmp_path, os.getpid() if pid is None else pid, quiet=True)
    det = StepDetector(ProfileOptions(quiet=True, time_fallback_after=time_fallback_after), journal, sink, manual=False)
    return det, sink


def _recorder(optimizers: int = 0) -> SimpleNamespace:
    return SimpleNamespace(optimizers=[{}] * optimizers, settings=SimpleNamespace(backward_calls=0))


def test_the_second_batch_chooses_the_dataloader_and_an_optimizer_step_takes_over(tmp_path: Path) -> None:
    det, sink = _detector(tmp_path)
    det.on_dataloader_next()  # the first batch starts step 0
    assert det.method is None and "boundary" not in sink.events
    det.on_dataloader_next()
    assert det.method is DL and det.steps_seen == 1 and sink.events.count("boundary") == 1
    sink.events.clear()
    det.on_optimizer_step(opt := object())
    # higher priority, before the window is exported: counting restarts under the optimizer
    assert sink.events == ["signal", "switch dataloader -> optimizer_step_hook", "boundary"]
    assert det.method is OPT and det.steps_seen == 1
    det.on_optimizer_step(object())  # a second optimizer (a GAN's) is no step
    det.on_optimizer_step(opt)
    assert det.steps_seen == 2


def test_after_the_window_the_method_is_fixed(tmp_path: Path) -> None:
    det, sink = _detector(tmp_path)
    det.on_dataloader_next()
    det.on_dataloader_next()
    sink.done = True
    sink.events.clear()
    det.on_optimizer_step(object())
    det.on_dataloader_next()
    assert det.method is DL and det.steps_seen == 2
    assert sink.events == ["boundary"]  # the optimizer step is no signal any more: no switch


def test_model_calls_wait_for_a_constructed_optimizer(tmp_path: Path) -> None:
    det, sink = _detector(tmp_path)
    det.recorder = _recorder(optimizers=1)
    for _ in range(4):  # an evaluation pass before training: no step
        det.on_forward()
    assert det.method is None and "boundary" not in sink.events
    assert "evaluation before training" in (tmp_path / "gpuadvisor.log").read_text()
    det.on_optimizer_step(object())
    assert det.method is OPT and det.steps_seen == 1


def test_model_calls_count_once_the_hold_is_over(tmp_path: Path) -> None:
    # a script that builds an optimizer and never steps it (the hold ends after time_fallback_after)
    det, sink = _detector(tmp_path, time_fallback_after=1e-9)
    det.recorder = _recorder(optimizers=1)
    det.on_forward()
    det.on_forward()  # held: the hold starts here and is over at once
    assert det.method is None
    det.on_forward()
    assert det.method is FWD and sink.events[-2:] == ["switch None -> module_forward", "boundary"]


def test_a_forked_process_counts_nothing(tmp_path: Path) -> None:
    det, sink = _detector(tmp_path, pid=os.getpid() + 1)
    det.on_optimizer_step(object())
    det.on_forward()
    det.on_dataloader_next()
    det.on_dataloader_next()
    assert det.method is None and sink.events == [] and not any(det.counts.values())


def test_the_end_says_how_steps_were_counted(tmp_path: Path) -> None:
    det, _ = _detector(tmp_path)
    det.finish()
    assert det.journal.has(Degraded.NO_STEPS_DETECTED)
    det, _ = _detector(tmp_path)
    det.on_dataloader_next()
    det.on_dataloader_next()
    det.finish()
    assert det.journal.degraded == [] and det.journal.messages == [
        "steps were counted by dataloader: the script never called optimizer.step() (or not before the window)."
    ]


def test_the_export_adds_distributed_info_only_when_torch_left_it_out(tmp_path: Path) -> None:
    journal = CaptureJournal(tmp_path, os.getpid(), quiet=True)
    export = TraceExport(tmp_path, rank=3, world_size=4, journal=journal)
    plain = tmp_path / "plain.json"
    plain.write_text('{\n  "traceEvents": [{"name": "x"}]\n}')
    export.gzip_with_dist_info(plain, tmp_path / "plain.json.gz")
    doc = json.loads(gzip.decompress((tmp_path / "plain.json.gz").read_bytes()))
    assert doc == {"distributedInfo": {"backend": None, "rank": 3, "world_size": 4}, "traceEvents": [{"name": "x"}]}
    dist = tmp_path / "dist.json"
    dist.write_bytes(b'{"distributedInfo": {"backend": "nccl", "rank": 1}, "traceEvents": []}')
    export.gzip_with_dist_info(dist, tmp_path / "dist.json.gz")
    assert gzip.decompress((tmp_path / "dist.json.gz").read_bytes()) == dist.read_bytes()


def test_child_file_names_per_rank() -> None:
    assert rank_file_name("environment.json", 0) == "environment.json"
    assert rank_file_name("environment.json", 2) == "environment.rank2.json"
    assert rank_state_file(0) == ".child_state.rank0.json"


def test_no_time_tick_while_an_optimizer_waits_or_a_model_call_runs(tmp_path: Path) -> None:
    """nanoGPT with torch.compile: the optimizer exists and the first model call compiles for tens of
    seconds. A time tick there used to choose `time` steps and lift the optimizer's hold (issue 38)."""
    det, sink = _detector(tmp_path)
    det.on_forward()  # the first call, still running (compiling)
    det.model_call_running = lambda: True
    assert not det.tick_allowed()
    det.time_step()
    assert det.method is None and sink.events == ["signal"]
    det.model_call_running = lambda: False
    det.recorder = _recorder(optimizers=1)
    assert not det.undecided() and not det.tick_allowed()  # the timer thread stops: training will come
    det.time_step()
    assert det.method is None and det.phase.value == "held"


def test_a_provisional_count_gives_way_to_the_optimizers_first_step(tmp_path: Path) -> None:
    det, sink = _detector(tmp_path, time_fallback_after=1e-9)
    det.recorder = _recorder(optimizers=1)
    for _ in range(3):
        det.on_forward()
    assert det.method is FWD and det.phase.value == "provisional" and det.awaiting_training()
    sink.events.clear()
    det.on_optimizer_step(object())
    assert det.method is OPT and det.phase.value == "training" and not det.awaiting_training()
    assert sink.events == ["signal", "switch module_forward -> optimizer_step_hook", "boundary"]
