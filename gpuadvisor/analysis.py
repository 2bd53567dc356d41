"""The analysis pipeline: input path -> traces (+ run info) -> metrics -> rules -> AnalysisResult.

`analyze()` is what `gpuadvisor analyze`, `gpuadvisor report`, `gpuadvisor diff` and the Python API
call; `analyze_fresh_run()` (findings.json, report.html and the summary, never raising) is what
`gpuadvisor profile` calls after the capture returned (the capture never imports the analysis), and
`python -m gpuadvisor.analysis RUN` is how the last rank of an external torchrun launch hands its
run over.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from gpuadvisor import engine, rundir
from gpuadvisor._atomic import write_text_atomic
from gpuadvisor.config import load_config
from gpuadvisor.errors import EXIT_OUTPUT_LOST, ConfigError, InputError, OutputLostError
from gpuadvisor.metrics import compute_metrics
from gpuadvisor.model import RuleMeta, sort_findings
from gpuadvisor.multirank import job_cross_rank
from gpuadvisor.namepattern import forget_names
from gpuadvisor.render import json_out, text
from gpuadvisor.result import AnalysisResult, SourceInfo
from gpuadvisor.rules_api import Rule
from gpuadvisor.runinfo import load_run_info, resolve_input
from gpuadvisor.stepmodel import build_step_model
from gpuadvisor.stepmodel import periodic as pc
from gpuadvisor.stepmodel.predict import combine_findings, group_findings
from gpuadvisor.terminal import strip_controls
from gpuadvisor.trace import load
from gpuadvisor.trace import model as tm
from gpuadvisor.trace.kind import job_labels, kind_of
from gpuadvisor.verify.results import attach_loaded, load_verify

if TYPE_CHECKING:
    from gpuadvisor.runinfo import RunInfo
    from gpuadvisor.trace.model import TraceModel

__all__ = [
    "analyze",
    "analyze_fresh_run",
    "analyze_run_and_write",
    "environment_of",
    "finding_dicts",
    "notes_of",
    "write_findings_json",
]

NOTE_RAW_TRACE = "raw trace: NVML, settings and call sites unavailable"
NOTE_CPU_ONLY = "CPU-only trace: GPU rules not applicable"

# Loading progress is shown only for traces bigger than this (small ones load in well under a second).
_PROGRESS_MIN_BYTES = 50 * 1024 * 1024


def _progress_printer(label: str, stream: IO[str]) -> Callable[[int, int], None]:
    """A load_trace progress callback printing "loading X: NN%" to stderr at most every 10%."""
    label = strip_controls(label)
    state = {"last": -10, "done": 0}

    def show(done: int, total: int) -> None:
        if total <= 0 or state["done"]:
            return
        pct = int(100 * done / total)
        if pct >= state["last"] + 10 or done >= total:
            state["last"] = pct
            stream.write(f"\rgpuadvisor: loading {label}: {min(pct, 100):3d}%")
            if done >= total:
                state["done"] = 1
                stream.write("\n")
            stream.flush()

    return show


def _is_tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _load_traces(paths: list[Path], *, progress: bool) -> list[TraceModel]:
    # A progress bar only where a person watches (never in a log or piped JSON).
    show = progress and _is_tty(sys.stderr)
    traces: list[TraceModel] = []
    if len(paths) > 1:
        # One rank per worker process: ranks load in parallel on multi-core machines.
        def done(path: Path, n: int, total: int) -> None:
            sys.stderr.write(f"\rgpuadvisor: loaded {n}/{total} traces ({strip_controls(path.name)})")
            sys.stderr.write("\n" if n == total else "")
            sys.stderr.flush()

        traces = load.load_trace_files(paths, on_done=done if show else None)
    else:
        for path in paths:
            callback = None
            try:
                big = path.stat().st_size >= _PROGRESS_MIN_BYTES
            except OSError:
                big = False
            if show and big:
                callback = _progress_printer(path.name, sys.stderr)
            # The loader takes the rank from distributedInfo.rank, else from the file name (rankN).
            traces.append(load.load_trace(path, progress=callback))
    for t in traces:
        if t.all_steps_cut:
            raise InputError(
                f"{t.path}: truncated, and the cut ran through every one of its {len(t.steps)} step"
                f"{'s' if len(t.steps) != 1 else ''} (their launches, kernels or ops after the cut were lost): "
                "no complete step is left to analyze"
            )
    # Rank 0 first (rules see the lowest rank as ctx.trace); ties keep file-name order.
    traces.sort(key=lambda t: t.rank)
    return traces


def _empty_trace(path: Path) -> TraceModel:
    """A trace with every table empty: a run whose trace was never exported still gets a report."""
    # lazy: pandas stays out of `import gpuadvisor.api`
    import pandas as pd

    def table(columns: tuple[str, ...]) -> pd.DataFrame:
        frame: pd.DataFrame = pd.DataFrame({c: pd.Series([], dtype="float64") for c in columns})
        return frame

    return tm.TraceModel(
        path=path,
        rank=0,
        meta=tm.TraceMeta(),
        kernels=table(tm.KERNEL_COLUMNS),
        copies=table(tm.COPY_COLUMNS),
        memsets=table(tm.MEMSET_COLUMNS),
        runtime=table(tm.RUNTIME_COLUMNS),
        cpu_ops=table(tm.CPU_OP_COLUMNS),
        annotations=table(tm.ANNOTATION_COLUMNS),
        steps=table(tm.STEP_COLUMNS),
        step_source=tm.STEP_SOURCE_NONE,
        warnings=["no trace file: the run's trace was not exported"],
    )


def environment_of(trace: TraceModel, run: RunInfo | None) -> dict[str, Any]:
    """The `environment` object of the JSON: environment.json for a run (plus a `gpu` name), else
    what the trace says (deviceProperties, CUDA versions, distributedInfo)."""
    meta = trace.meta
    env: dict[str, Any] = {}
    if run is not None and run.environment:
        env = {k: v for k, v in run.environment.items() if k != "schema_version"}
        gpu = run.gpu(0)
        if gpu and gpu.get("name"):
            env.setdefault("gpu", gpu.get("name"))
    env.setdefault("source", "environment.json" if run is not None and run.environment else "trace")
    props = meta.device(0)
    if props:
        env.setdefault("gpu", props.get("name"))
        major, minor = props.get("computeMajor"), props.get("computeMinor")
        if major is not None:
            env.setdefault("compute_capability", f"{major}.{minor if minor is not None else 0}")
        if props.get("numSms") is not None:
            env.setdefault("sm_count", props.get("numSms"))
        if props.get("totalGlobalMem") is not None:
            env.setdefault("total_memory_bytes", props.get("totalGlobalMem"))
        env.setdefault("gpu_count_in_trace", len(meta.device_properties))
    if meta.cuda_driver_version is not None:
        env.setdefault("cuda_driver_version", meta.cuda_driver_version)
    if meta.cuda_runtime_version is not None:
        env.setdefault("cuda_runtime_version", meta.cuda_runtime_version)
    if meta.torch_version:
        env.setdefault("torch", meta.torch_version)
    if meta.distributed_info:
        for key in ("world_size", "backend"):
            if key in meta.distributed_info:
                env.setdefault(f"distributed_{key}", meta.distributed_info[key])
    env["trace_kind"] = kind_of(trace).to_dict()
    return env


def notes_of(
    trace: TraceModel, run: RunInfo | None, extra: Iterable[str] = (), traces: Sequence[TraceModel] = ()
) -> list[str]:
    """Human notes on degraded inputs and what the trace is (its TraceKind labels), de-duplicated, in a
    stable order. `traces`: every rank of a multi-rank analysis (adds the job's label)."""
    notes: list[str] = []
    if run is None:
        notes.append(NOTE_RAW_TRACE)
    else:
        messages = run.manifest.get("messages")
        messages = [str(m) for m in messages] if isinstance(messages, list) else []
        flags = run.record.degraded
        # The capture writes a message with each flag it sets (the message has the detail: which NVML
        # error, which step): the flags are said in words only where fewer messages came with them.
        unknown = run.record.unknown_degraded  # written by a newer gpuadvisor: only the id is known
        if len(messages) < len(flags) + len(unknown):
            notes.extend(flag.describe() for flag in flags)
            notes.extend(f"degraded: {flag}" for flag in unknown)
        notes.extend(messages)
        notes.extend(run.notes)
    # What the trace is (vendor, training or inference, schema, graphs, ranks): said once, here.
    notes.extend(kind_of(trace).labels())
    if len(traces) > 1:
        notes.extend(job_labels({t.rank: kind_of(t) for t in traces}))
    if trace.is_synthetic:
        notes.append("synthetic trace (built by the test suite)")
    notes.extend(trace.warnings)
    notes.extend(extra)
    seen: set[str] = set()
    out: list[str] = []
    for note in notes:
        if note and note not in seen:
            seen.add(note)
            out.append(note)
    return out


def run_timing_notes(model: Any) -> list[str]:
    """What the run is beyond the analyzed steps (issue 27): "training with evaluation" and the costs
    between steps the capture timed, each with its count, cost and share of the observed run (a cost
    seen once says that its period was not observed)."""
    out: list[str] = []
    if model.host_ran_ahead:
        out.append(
            f"the host ran ahead of the GPU inside the profiler window: {model.profiled_step_ms:.2f} ms steps "
            f"on the host while the launch queue filled, {model.unprofiled_step_ms:.2f} ms a step without the "
            "profiler, which the GPU's own work explains: the run is priced at the GPU's pace"
        )
    elif model.step_times_agree is False:
        out.append(
            f"step times disagree: {model.unprofiled_step_ms:.2f} ms a step without the profiler against "
            f"{model.profiled_step_ms:.2f} ms inside its window (the profiler only adds work, and not this much): "
            "the machine's load or the script's phase changed between them. Impacts are shares of the profiled "
            "step, not rescaled; profile again on a quiet machine to price the run"
        )
    timing = model.run_timing
    if timing is None:
        return out
    evaluation = timing.cost(pc.EVALUATION)
    if evaluation is not None and model.is_training:
        out.append(
            f"run kind: training with evaluation ({evaluation.count} evaluation pass"
            f"{'es' if evaluation.count > 1 else ''} seen; the analyzed steps are training steps)"
        )
    parts = []
    for c in timing.costs:
        steps = ", ".join("before the first step" if s is None else f"step {s}" for s in c.steps[:4])
        if c.count > 4:
            steps += f" and {c.count - 4} more"
        period = (
            f"every {c.period_steps} steps"
            if c.period_source == "observed"
            else f"every {c.period_steps} steps, after each evaluation (seen once: step {c.steps[0]})"
            if c.period_source == "with_evaluation"
            else f"every {c.period_steps} steps by the loader's epoch length"
            if c.period_observed
            else f"seen once ({steps}): its period was not observed"
        )
        if c.detail.get("before_first_step_ms"):
            period += f"; the one before the first step, {c.detail['before_first_step_ms'] / 1000:.1f} s, is start-up"
        parts.append(
            f"{c.label}: {c.count} x {c.each_ms:.1f} ms ({steps if c.count > 1 else period}"
            f"{', ' + period if c.count > 1 else ''}), {100 * c.share:.1f}% of the run"
        )
    if parts:
        out.append(
            f"costs between steps over the {timing.steps_observed} steps the capture timed (typical step "
            f"{timing.typical_step_ms:.2f} ms, mean {timing.mean_step_ms:.2f} ms): " + "; ".join(parts)
        )
    st = timing.stalls
    if st is not None:
        cause = (
            "waits in DataLoader __next__: the loader sets the loop's pace"
            if st.cause == "data"
            else "the run did not record why"
        )
        every = f"every {st.pattern.period} steps" if st.pattern.period else "irregularly"
        out.append(
            f"stalls: {st.pattern.count} of the {st.steps_timed} steps timed wait {st.pattern.mean_excess_ms:.1f} ms "
            f"more than the median step ({every}; {cause}): {st.per_step_ms:.2f} ms per step, "
            f"{100 * st.per_step_ms / timing.mean_step_ms:.1f}% of the mean step {timing.mean_step_ms:.2f} ms"
        )
    su = timing.startup
    if su is not None:
        labels = {
            "compile": "torch.compile",
            "evaluation_before_training": "evaluation before training",
            "dataloader_workers": "DataLoader workers' first start",
            "first_steps": "first steps until the step time settled",
        }
        parts_text = ", ".join(f"{labels.get(k, k)} {v:.1f} s" for k, v in su.parts.items() if v >= 0.05)
        out.append(
            f"start-up: {su.seconds:.1f} s before the steady steps"
            + (f" (step {su.settled_step} on)" if su.settled_step is not None else "")
            + (f", of which {parts_text}" if parts_text else "")
            + "; paid once, not in any per-step share"
        )
    out.extend(n[0].upper() + n[1:] + "." for n in timing.window_notes)
    return out


def analyze(
    path: str | os.PathLike[str],
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    rules_dirs: Iterable[str | os.PathLike[str]] = (),
    progress: bool = False,
    step_time_ms: float | None = None,
) -> AnalysisResult:
    """Analyze a run directory, a Kineto trace file (.json / .json.gz) or a folder of per-rank traces.

    `select`/`ignore` take rule ids, id prefixes ("GA2"), names, aliases or categories; `thresholds`
    maps a rule id or name to {threshold: value}; `rules_dirs` adds folders of user rules. Raises
    InputError / ConfigError (exit code 2) for unreadable input or bad options; a rule that raises
    becomes an internal-error finding and the other rules still run. `step_time_ms`: the step time
    the run reaches without the profiler, when you know it (from the script's logs); the replay
    calibrates its host work to it instead of the steps the capture timed before the window."""
    try:
        return _analyze(path, select, ignore, thresholds, rules_dirs, progress, step_time_ms)
    finally:
        forget_names()  # the distinct names classified on the way (a process may analyze many traces)


def _analyze(
    path: str | os.PathLike[str],
    select: Iterable[str],
    ignore: Iterable[str],
    thresholds: Mapping[str, Mapping[str, float]] | None,
    rules_dirs: Iterable[str | os.PathLike[str]],
    progress: bool,
    step_time_ms: float | None,
) -> AnalysisResult:
    started = time.monotonic()
    source_path = Path(path)
    # Rules first: a broken --rules folder or a bad selector is reported before a long trace load.
    loaded = engine.load_rules([Path(d) for d in rules_dirs])
    rule_classes = [r.cls for r in loaded]
    select_t, ignore_t = tuple(select), tuple(ignore)
    engine.select_rules(rule_classes, select_t, ignore_t)
    engine.resolve_thresholds(rule_classes, thresholds)

    kind, run_dir, trace_paths = resolve_input(source_path)
    run = load_run_info(run_dir) if run_dir is not None else None
    if run is not None:
        trace_paths = run.trace_paths  # the same list, read once more with the notes of what was refused
    extra_notes: list[str] = []
    if trace_paths:
        traces = _load_traces(list(trace_paths), progress=progress)
    elif run is not None:
        traces = [_empty_trace(source_path / rundir.TRACE_DIR / "rank0.json.gz")]
        extra_notes.append("the run directory holds no trace: only capture information is analyzed")
    else:  # resolve_input never returns a trace kind without files; keep the error explicit anyway
        raise InputError(f"{source_path}: no trace to analyze")
    trace = traces[0]

    metrics = None
    if step_time_ms is not None:
        if not (step_time_ms > 0 and step_time_ms < float("inf")):
            raise ConfigError(f"step_time_ms={step_time_ms!r}: give the milliseconds per step, > 0")
        metrics = compute_metrics(
            trace, run, build_step_model(trace, run, reference_step_ms=float(step_time_ms))
        )
    metrics, _, factory = engine.make_context(trace, run, metrics, traces=traces if len(traces) > 1 else ())
    findings, statuses = engine.run_rules(
        factory, rule_classes, select=select_t, ignore=ignore_t, thresholds=thresholds
    )
    step_model = getattr(metrics, "model", None)
    if step_model is not None:
        extra_notes.extend(run_timing_notes(step_model))
    if step_model is not None and step_model.program.steps:
        findings = group_findings(step_model, findings)
    verify_doc = None
    if run is not None:  # measured remedies (gpuadvisor verify) join their findings
        verify_doc, problem = load_verify(run.run_dir)
        findings, verify_notes = attach_loaded(findings, verify_doc, problem)
        extra_notes.extend(verify_notes)
    prediction = _combined_prediction(metrics, findings)
    if progress and time.monotonic() - started > 2.0:
        sys.stderr.write(f"gpuadvisor: analyzed {source_path} in {time.monotonic() - started:.1f} s\n")
    return AnalysisResult(
        source=SourceInfo(
            path=str(source_path),
            kind="run" if kind == "run" else "trace",
            ranks=tuple(t.rank for t in traces),
        ),
        environment=_with_run_timing(environment_of(trace, run), step_model),
        metrics=dict(metrics.window),
        findings=sort_findings(findings),
        rules=statuses,
        notes=notes_of(trace, run, [*metrics.notes, *extra_notes], traces),
        trace=trace,
        metrics_detail=metrics,
        run=run,
        traces=tuple(traces) if len(traces) > 1 else (),
        prediction=prediction,
        cross_rank=job_cross_rank(traces, trace, metrics) if len(traces) > 1 else None,
        rule_docs=rule_docs(rule_classes),
        verify=verify_doc,
    )


def rule_docs(rule_classes: Iterable[type[Rule]]) -> dict[str, RuleMeta]:
    """The documentation of the loaded rules, by id (`AnalysisResult.rule_docs`)."""
    return {
        cls.id: RuleMeta(
            id=cls.id,
            name=cls.name,
            category=cls.category.value,
            summary=cls.summary(),
            doc=inspect.cleandoc(cls.__doc__ or ""),
            references=tuple(cls.references),
        )
        for cls in rule_classes
    }


def _with_run_timing(env: dict[str, Any], model: Any) -> dict[str, Any]:
    """`environment.run_timing`: the run as timed step by step and its costs between steps (issue 27;
    gpuadvisor.stepmodel.periodic.RunTiming.to_dict), when the capture timed enough steps."""
    timing = model.run_timing if model is not None else None
    if timing is not None:
        env["run_timing"] = timing.to_dict()
    return env


def _combined_prediction(metrics: Any, findings: list[Any]) -> dict[str, Any] | None:
    """The top findings' remedies replayed together (gpuadvisor.stepmodel.predict.combine_findings)."""
    model = getattr(metrics, "model", None)
    if model is None or model.program.steps == 0:
        return None
    pred, rules = combine_findings(model, findings)
    if pred is None:
        return None
    out = pred.to_dict()
    out["rules"] = rules
    return out


def finding_dicts(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The findings of a fresh analysis of `run_dir`, as the JSON objects of findings.json (what
    `gpuadvisor verify` plans its trials from when the run has no findings.json)."""
    return [f.to_dict() for f in analyze(run_dir).findings]


def write_findings_json(result: AnalysisResult, path: Path) -> Path:
    """Write `result` as the JSON contract, atomically (temporary file in the same folder, then rename)."""
    body = json_out.render(result)
    path = Path(path)
    try:
        write_text_atomic(path, body)
    except OSError as err:
        raise OutputLostError(f"cannot write {path}: {err.strerror or err}") from None
    return path


def analyze_run_and_write(
    run_dir: str | os.PathLike[str], *, stream: IO[str] | None = None, report: bool = True
) -> AnalysisResult:
    """Analyze a fresh run directory, write RUN/findings.json and (unless `report` is false)
    RUN/report.html, and print the terminal summary and the report's path (to `stream`, default
    stderr, so that the script's own stdout stays clean). Used by `profile`.
    Configuration ([tool.gpuadvisor] of the nearest pyproject.toml) applies when it can be read."""
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    thresholds: Mapping[str, Mapping[str, float]] | None = None
    dirs: tuple[Path, ...] = ()
    try:
        config = load_config()
        select, ignore, thresholds, dirs = config.select, config.ignore, config.thresholds, config.rules_dirs
    except ImportError:
        pass
    result = analyze(
        run_dir, select=select, ignore=ignore, thresholds=thresholds, rules_dirs=dirs, progress=True
    )
    write_findings_json(result, Path(run_dir) / rundir.FINDINGS)
    out = stream if stream is not None else sys.stderr
    out.write(text.render(result))
    if report:
        # lazy: the HTML renderer (templates, figures: ~1700 lines) loads only when a report is written
        from gpuadvisor.render import html

        page = html.write_report(result, Path(run_dir) / rundir.REPORT)
        out.write(f"gpuadvisor: report: {page}\n")
    out.flush()
    return result


def analyze_fresh_run(run_dir: str | os.PathLike[str], *, quiet: bool) -> str | None:
    """`analyze_run_and_write` for a run the capture just wrote: never fails the profile. Returns what
    could not be written (findings.json / report.html on a full disk), else None; errors go to the
    run's log and, unless `quiet`, to stderr."""
    run_dir = Path(run_dir)
    log = run_dir / rundir.LOG
    if not (run_dir / rundir.MANIFEST).is_file():
        return None  # the run directory was deleted under the run: the capture's last line said so
    try:
        analyze_run_and_write(run_dir)
    except (OSError, OutputLostError) as err:
        lost = [n for n in (rundir.FINDINGS, rundir.REPORT) if not (run_dir / n).is_file()]
        what = " and ".join(lost) or "the analysis outputs"
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        _append_log(log, f"analysis outputs not written: {err}")
        if not quiet:
            sys.stderr.write(f"gpuadvisor: {what} could not be written ({why}); the run is kept\n")
        return f"{what} could not be written ({why})"
    except Exception as err:
        _append_log(log, f"analysis failed: {type(err).__name__}: {err}")
        if not quiet:
            sys.stderr.write(
                f"gpuadvisor: analysis failed ({type(err).__name__}: {strip_controls(str(err))}); the run is kept\n"
            )
    return None


def _append_log(path: Path, msg: str) -> None:
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [analysis {os.getpid()}] {msg}\n")


def main(argv: Sequence[str]) -> int:
    """`python -m gpuadvisor.analysis RUN [--quiet]`: analyze a fresh run directory (what the last rank
    of an external torchrun launch runs, `gpuadvisor/capture/rank.py`). Exit 0, or 74 when outputs
    were lost."""
    quiet = "--quiet" in argv
    paths = [a for a in argv if a != "--quiet"]
    if len(paths) != 1:
        sys.stderr.write("usage: python -m gpuadvisor.analysis RUN_DIR [--quiet]\n")
        return 2
    return EXIT_OUTPUT_LOST if analyze_fresh_run(paths[0], quiet=quiet) is not None else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
