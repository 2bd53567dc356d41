"""The rules engine: find rules, validate them, decide which apply, run them, contain their failures.

Rules come from three places, all loaded the same way:

1. built-ins: the `rules/` folder of the source tree, shipped in the wheel as `gpuadvisor.builtin_rules`;
2. user folders given with `--rules DIR` (or `rules_dirs` in `[tool.gpuadvisor]`);
3. the `gpuadvisor.rules` entry point group: an entry point names a `Rule` subclass or a module holding some.

Folders are read file by file: each `GA*.py` (built-ins) or `*.py` not starting with `_` (user folders)
is imported by *file path* under a unique module name, so two folders may both hold `rules.py` and a
user folder never shadows an installed package. Every class derived from `Rule` and defined in that
file with a non-empty `id` is a rule.

`run_rules` runs each selected rule on its own `RuleContext`. A rule whose `requires` are not all
available is reported "not_applicable" with the missing inputs in words; a rule that raises becomes
one internal-error finding (category `internal`, severity `info`) and status "error", and the other
rules still run.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import math
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpuadvisor.errors import ConfigError
from gpuadvisor.metrics import compute_metrics
from gpuadvisor.model import Category, Finding, RuleStatus, Severity
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.rundir import CALLSITES
from gpuadvisor.trace.kind import TraceKind, Vendor, Workload, kind_of
from gpuadvisor.trace.model import TraceModel

if TYPE_CHECKING:
    from gpuadvisor.metrics import Metrics
    from gpuadvisor.runinfo import RunInfo
    from gpuadvisor.trace.kind import TraceKind
    from gpuadvisor.trace.model import TraceModel

__all__ = [
    "ENTRY_POINT_GROUP",
    "REQUIRED_DOC_SECTIONS",
    "LoadedRule",
    "RuleLoadError",
    "available_requirements",
    "builtin_rules_dir",
    "describe_missing",
    "find_rule",
    "load_rules",
    "resolve_thresholds",
    "run_rules",
    "run_single_rule",
    "select_rules",
]

ENTRY_POINT_GROUP = "gpuadvisor.rules"
REQUIRED_DOC_SECTIONS = ("Why it matters", "How it is detected", "How to fix")

_NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_ID_RE = re.compile(r"^[A-Z][A-Z0-9]*[0-9]+$")

# What each missing input means for the user, in words (shown as the not-applicable detail).
_MISSING_TEXT: dict[Requirement, str] = {
    Requirement.GPU_KERNELS: "needs GPU kernels: the trace has none",
    Requirement.STEPS: "needs training steps: the trace has no step markers (ProfilerStep, optimizer step, DataLoader)",
    Requirement.NVML: "needs NVML samples",
    Requirement.SETTINGS: "needs the settings captured at run time (environment.json)",
    Requirement.CALLSITES: "needs the captured call sites (callsites.json)",
    Requirement.RECORD_SHAPES: "needs input shapes and dtypes (record_shapes=True)",
    Requirement.FLOPS: "needs FLOP counts (with_flops=True)",
    Requirement.DEVICE_PROPERTIES: "needs the trace's deviceProperties",
    Requirement.MULTI_RANK: "needs traces of more than one rank",
    Requirement.TRAINING: "needs a training run (a backward pass or an optimizer step in the trace)",
    Requirement.NVIDIA_GPU: "needs an NVIDIA GPU (CUDA-specific advice)",
    Requirement.STEADY_STATE: "needs steps whose GPU work ran (no CUDA/HIP graph capture in them)",
}
_RUN_ONLY = frozenset({Requirement.NVML, Requirement.SETTINGS, Requirement.CALLSITES})


class RuleLoadError(ConfigError):
    """A rule file, folder or entry point could not be loaded or defines an invalid rule (exit 2)."""


@dataclass(frozen=True)
class LoadedRule:
    """A validated rule class and where it came from (for `gpuadvisor rules` and error messages)."""

    cls: type[Rule]
    origin: str  # "builtin", "user" or "entry_point"
    source: str  # file path, or "entry point NAME (VALUE)"

    @property
    def id(self) -> str:
        return self.cls.id

    @property
    def name(self) -> str:
        return self.cls.name


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------

# Loaded modules by resolved file path and modification time: analyzing twice in one process (tests,
# notebooks) must not re-import rule files, which would make two distinct classes of one rule.
_MODULE_CACHE: dict[tuple[str, int], ModuleType] = {}


def builtin_rules_dir() -> Path:
    """The folder of the built-in rules: the installed `gpuadvisor.builtin_rules` package when it can
    be found, else `<repo>/rules` next to the `gpuadvisor` package (a source checkout)."""
    try:
        spec = importlib.util.find_spec("gpuadvisor.builtin_rules")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if Path(location).is_dir():
                return Path(location)
    return Path(__file__).resolve().parent.parent / "rules"


def _import_file(path: Path, origin: str) -> ModuleType:
    resolved = path.resolve()
    try:
        mtime = resolved.stat().st_mtime_ns
    except OSError as err:
        raise RuleLoadError(f"cannot read rule file {path}: {err.strerror or err}") from None
    key = (str(resolved), mtime)
    cached = _MODULE_CACHE.get(key)
    if cached is not None:
        return cached
    digest = hashlib.sha1(str(resolved).encode("utf-8")).hexdigest()[:12]
    stem = re.sub(r"\W", "_", resolved.stem)
    module_name = f"_gpuadvisor_rules_{origin}_{digest}_{stem}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise RuleLoadError(f"cannot import rule file {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered before executing so that dataclasses and pickling inside the rule file can find it.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        sys.modules.pop(module_name, None)
        raise RuleLoadError(f"rule file {path}:{err.lineno}: syntax error: {err.msg}") from None
    except Exception as err:
        sys.modules.pop(module_name, None)
        line = _user_line(err, resolved)
        where = f"{path}:{line}" if line else str(path)
        raise RuleLoadError(f"rule file {where}: {type(err).__name__}: {err}") from None
    _MODULE_CACHE[key] = module
    return module


def _user_line(err: BaseException, path: Path) -> int | None:
    """Line of the rule file where an import-time exception was raised (for the one-line message)."""
    line = None
    for frame in traceback.extract_tb(err.__traceback__):
        if Path(frame.filename).resolve() == path:
            line = frame.lineno
    return line


def _rules_in_module(module: ModuleType, *, defined_here: bool = True) -> list[type[Rule]]:
    found: list[type[Rule]] = []
    for _, obj in inspect.getmembers(module, inspect.isclass):
        if not issubclass(obj, Rule) or obj is Rule:
            continue
        if defined_here and obj.__module__ != module.__name__:
            continue  # imported base classes or other rules: counted where they are defined
        if not obj.id:
            continue  # an abstract helper base class
        found.append(obj)
    return sorted(found, key=lambda c: c.id)


def validate_rule(cls: type[Rule], source: str) -> None:
    """Raise RuleLoadError (naming `source`) when a rule class breaks the Rule contract."""

    def bad(why: str) -> RuleLoadError:
        return RuleLoadError(f"invalid rule {cls.__name__} in {source}: {why}")

    if not isinstance(cls.id, str) or not _ID_RE.match(cls.id):
        raise bad(f"id {cls.id!r} must look like 'GA201' (capital letters then digits)")
    if not isinstance(cls.name, str) or not _NAME_RE.match(cls.name):
        raise bad(f"name {cls.name!r} must be lower-case words joined by '-' (e.g. 'blocking-scalar-reads')")
    if not isinstance(cls.category, Category) or cls.category is Category.INTERNAL:
        raise bad(f"category {cls.category!r} must be a gpuadvisor.model.Category (not INTERNAL)")
    if not isinstance(cls.requires, (frozenset, set)) or not all(
        isinstance(r, Requirement) for r in cls.requires
    ):
        raise bad("requires must be a frozenset of Requirement")
    if not isinstance(cls.thresholds, Mapping):
        raise bad("thresholds must be a mapping of name -> Threshold")
    for key, thr in cls.thresholds.items():
        if not isinstance(key, str) or not isinstance(thr, Threshold):
            raise bad(f"threshold {key!r} must map a str to a Threshold")
        if not isinstance(thr.default, (int, float)) or not math.isfinite(float(thr.default)):
            raise bad(f"threshold {key!r} default must be a finite number")
    if cls.check is Rule.check:
        raise bad("it does not implement check(ctx)")
    doc = inspect.getdoc(cls) or ""
    missing = [s for s in REQUIRED_DOC_SECTIONS if s.lower() not in doc.lower()]
    if not doc.strip() or missing:
        raise bad("docstring must have a summary line and sections " + ", ".join(repr(s) for s in missing))


def _load_folder(folder: Path, origin: str, pattern: str) -> list[LoadedRule]:
    if not folder.is_dir():
        raise RuleLoadError(f"rules folder {folder} does not exist or is not a directory")
    loaded: list[LoadedRule] = []
    for path in sorted(folder.glob(pattern)):
        if path.name.startswith("_") or not path.is_file():
            continue
        module = _import_file(path, origin)
        classes = _rules_in_module(module)
        if origin == "user" and not classes:
            continue  # helper modules in a user folder are fine
        for cls in classes:
            validate_rule(cls, str(path))
            loaded.append(LoadedRule(cls=cls, origin=origin, source=str(path)))
    return loaded


def _load_entry_points() -> list[LoadedRule]:
    loaded: list[LoadedRule] = []
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        source = f"entry point {ep.name} ({ep.value})"
        try:
            obj = ep.load()
        except Exception as err:
            raise RuleLoadError(f"cannot load rules from {source}: {type(err).__name__}: {err}") from None
        if isinstance(obj, ModuleType):
            classes = _rules_in_module(obj)
        elif inspect.isclass(obj) and issubclass(obj, Rule):
            classes = [obj]
        else:
            raise RuleLoadError(f"{source} names neither a Rule subclass nor a module")
        for cls in classes:
            validate_rule(cls, source)
            loaded.append(LoadedRule(cls=cls, origin="entry_point", source=source))
    return loaded


def load_rules(
    rules_dirs: Iterable[str | Path] = (),
    *,
    builtin: bool = True,
    entry_points: bool = True,
) -> list[LoadedRule]:
    """Load, validate and return every rule (built-ins, `rules_dirs`, entry points), sorted by id.

    Raises RuleLoadError (exit 2) naming the file or entry point for an unimportable file, an invalid
    rule, or an id/name/alias used twice."""
    loaded: list[LoadedRule] = []
    if builtin:
        loaded += _load_folder(builtin_rules_dir(), "builtin", "GA*.py")
    for folder in rules_dirs:
        loaded += _load_folder(Path(folder), "user", "*.py")
    if entry_points:
        loaded += _load_entry_points()
    _check_unique(loaded)
    return sorted(loaded, key=lambda r: r.id)


def _check_unique(loaded: Sequence[LoadedRule]) -> None:
    seen: dict[str, LoadedRule] = {}
    for rule in loaded:
        keys = {rule.id.lower(), rule.name.lower(), *(a.lower() for a in rule.cls.aliases)}
        for key in sorted(keys):
            other = seen.get(key)
            if other is not None and other.cls is not rule.cls:
                raise RuleLoadError(
                    f"rule {rule.id} ({rule.source}) reuses {key!r} of rule {other.id} ({other.source})"
                )
            seen[key] = rule


# ---------------------------------------------------------------------------------------------
# Selection and thresholds
# ---------------------------------------------------------------------------------------------


def _matches(rule: type[Rule], selector: str) -> bool:
    s = selector.strip().lower()
    if not s:
        return False
    if s in {rule.id.lower(), rule.name.lower(), rule.category.value, *(a.lower() for a in rule.aliases)}:
        return True
    # An id prefix selects a family, as in ruff/flake8: "GA2" selects GA201, GA202, GA203.
    return bool(re.fullmatch(r"[a-z][a-z0-9]*", s)) and rule.id.lower().startswith(s) and s[-1].isdigit()


def _all_keys(rules: Sequence[type[Rule]]) -> list[str]:
    keys: set[str] = {c.value for c in Category if c is not Category.INTERNAL}
    for r in rules:
        keys |= {r.id, r.name, *r.aliases}
    return sorted(keys)


# A suggestion must be this close to what was typed (difflib ratio), and within SUGGEST_MARGIN of the
# closest one: "blocking-scalar-read" suggests blocking-scalar-reads (0.97), not clocks-throttled (0.5).
SUGGEST_CUTOFF = 0.5
SUGGEST_MARGIN = 0.15


def close_matches(value: str, candidates: Sequence[str], n: int = 3) -> list[str]:
    """The candidates closest to `value` (case-insensitive), best first: at least SUGGEST_CUTOFF alike and
    no further than SUGGEST_MARGIN from the best of them."""
    typed = value.strip().lower()
    scored = sorted(
        ((difflib.SequenceMatcher(None, typed, c.lower()).ratio(), c) for c in candidates),
        key=lambda sc: (-sc[0], sc[1]),
    )
    if not scored or scored[0][0] < SUGGEST_CUTOFF:
        return []
    best = scored[0][0]
    return [c for score, c in scored[:n] if score >= max(SUGGEST_CUTOFF, best - SUGGEST_MARGIN)]


def _unknown(what: str, value: str, candidates: Sequence[str]) -> ConfigError:
    close = close_matches(value, candidates)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return ConfigError(f"unknown {what} {value!r}{hint}")


def select_rules(
    rules: Sequence[type[Rule]], select: Iterable[str] = (), ignore: Iterable[str] = ()
) -> tuple[list[type[Rule]], list[type[Rule]]]:
    """Split `rules` into (selected, deselected). An empty `select` selects all; `ignore` wins over
    `select`. Selectors are rule ids, names, aliases, category values or id prefixes ("GA2");
    an unknown selector is a ConfigError with close matches."""
    select = [s for s in select if s.strip()]
    ignore = [s for s in ignore if s.strip()]
    for selector in [*select, *ignore]:
        if not any(_matches(r, selector) for r in rules):
            raise _unknown("rule or category", selector, _all_keys(rules))
    selected: list[type[Rule]] = []
    deselected: list[type[Rule]] = []
    for rule in rules:
        chosen = not select or any(_matches(rule, s) for s in select)
        if any(_matches(rule, s) for s in ignore):
            chosen = False
        (selected if chosen else deselected).append(rule)
    return selected, deselected


def find_rule(rules: Sequence[type[Rule]], key: str) -> type[Rule]:
    """The rule whose id, name or alias is `key` (case-insensitive); ConfigError with close matches."""
    k = key.strip().lower()
    for rule in rules:
        if k in {rule.id.lower(), rule.name.lower(), *(a.lower() for a in rule.aliases)}:
            return rule
    names = sorted({x for r in rules for x in (r.id, r.name, *r.aliases)})
    raise _unknown("rule", key, names)


def resolve_thresholds(
    rules: Sequence[type[Rule]], overrides: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, dict[str, float]]:
    """Per rule id: its thresholds (defaults, then overrides keyed by rule id, name or alias).
    Unknown rule, unknown threshold key or a non-numeric value is a ConfigError."""
    out = {r.id: {k: float(t.default) for k, t in r.thresholds.items()} for r in rules}
    for rule_key, values in sorted((overrides or {}).items()):
        rule = find_rule(rules, rule_key)
        if not isinstance(values, Mapping):
            raise ConfigError(f"thresholds for {rule_key!r} must be a table of name = number")
        for key, value in sorted(values.items()):
            if key not in rule.thresholds:
                choices = sorted(rule.thresholds)
                err = _unknown(f"threshold of {rule.id} ({rule.name})", key, choices)
                raise ConfigError(f"{err}; known: {', '.join(choices) or 'none'}")
            try:
                number = float(value)
                if isinstance(value, bool) or not math.isfinite(number):
                    raise ValueError
            except (TypeError, ValueError):
                raise ConfigError(
                    f"threshold {rule.id}.{key} must be a finite number, got {value!r}"
                ) from None
            out[rule.id][key] = number
    return out


# ---------------------------------------------------------------------------------------------
# Requirements
# ---------------------------------------------------------------------------------------------


def _has_rows(table: Any) -> bool:
    try:
        return table is not None and len(table) > 0
    except TypeError:
        return False


# the NVML readings the rules use; rows where all of them are empty are not samples
_NVML_READINGS = ("util_gpu_pct", "mem_used_bytes", "power_w", "temp_c", "sm_clock_mhz", "throttle_reasons")


def _nvml_usable(table: Any) -> bool:
    """NVML samples with at least one reading (a sampler whose every counter was empty has none)."""
    return any(_column_has_values(table, c) for c in _NVML_READINGS)


def _column_has_values(table: Any, column: str) -> bool:
    if not _has_rows(table) or column not in getattr(table, "columns", ()):
        return False
    try:
        # The first value that is not null, not empty and not "[]" decides (text of every row of a
        # large trace's Input Dims took 0.1 s).
        for v in table[column].dropna():
            t = v if isinstance(v, str) else str(v)
            if t and t != "[]":
                return True
    except Exception:
        return False
    return False


def available_requirements(
    trace: TraceModel, run: RunInfo | None, metrics: Metrics | None = None, *, ranks: int = 1
) -> frozenset[Requirement]:
    """Which inputs this analysis has: computed from the trace tables, the run directory and the
    number of rank traces. Rules that need something else are reported not applicable."""
    have: set[Requirement] = set()
    if _has_rows(getattr(trace, "kernels", None)):
        have.add(Requirement.GPU_KERNELS)
    # A trace without step markers is analyzed as one "whole trace" step: fine for time shares, but
    # not a training step, so per-step rules (counts per step, per-step waits) do not apply to it.
    step_source = getattr(trace, "step_source", None)
    if _has_rows(getattr(trace, "steps", None)) and step_source not in ("whole_trace", "none"):
        have.add(Requirement.STEPS)
    meta = getattr(trace, "meta", None)
    if meta is not None and getattr(meta, "device_properties", None):
        have.add(Requirement.DEVICE_PROPERTIES)
    cpu_ops = getattr(trace, "cpu_ops", None)
    if (meta is not None and getattr(meta, "record_shapes", False)) or _column_has_values(
        cpu_ops, "input_types"
    ):
        have.add(Requirement.RECORD_SHAPES)
    if _column_has_values(cpu_ops, "flops"):
        have.add(Requirement.FLOPS)
    if run is not None:
        if _nvml_usable(getattr(run, "nvml", None)):
            have.add(Requirement.NVML)
        env = getattr(run, "environment", None) or {}
        if env.get("settings") or env.get("dataloaders") or env.get("optimizers") or env.get("gpus"):
            have.add(Requirement.SETTINGS)
        if _callsites_recorded(run):
            have.add(Requirement.CALLSITES)
    if ranks > 1:
        have.add(Requirement.MULTI_RANK)
    kind = _kind(trace)
    if kind is not None:
        if kind.is_training:
            have.add(Requirement.TRAINING)
        if kind.is_nvidia and kind.accelerator_activity:
            have.add(Requirement.NVIDIA_GPU)
        if not kind.capture_in_window:
            have.add(Requirement.STEADY_STATE)
    return frozenset(have)


def _kind(trace: Any) -> TraceKind | None:
    """The trace's `TraceKind` (classified once for a TraceModel); None for a stand-in without tables."""
    if isinstance(trace, TraceModel):
        return kind_of(trace)
    kind = getattr(trace, "kind", None)
    return kind if isinstance(kind, TraceKind) else None


def _callsites_recorded(run: RunInfo) -> bool:
    """callsites.json was written (an empty list then means "no host syncs seen", which is evidence)."""
    flag = getattr(run, "callsites_available", None)
    if flag is not None:
        return bool(flag)
    run_dir = getattr(run, "run_dir", None)
    if run_dir is not None:
        return (Path(run_dir) / CALLSITES).is_file()
    return bool(getattr(run, "callsites", None))


def describe_missing(
    missing: Iterable[Requirement], run: RunInfo | None, trace: TraceModel | None = None
) -> str:
    """The not-applicable detail: what is missing and why, e.g. "needs NVML samples: this is a raw trace".

    With `trace`, what the trace is (its TraceKind) says why: "inference run: no optimizer step or
    backward pass in the trace", "AMD GPU (ROCm): CUDA-specific advice does not apply"."""
    kind = _kind(trace) if trace is not None else None
    missing = set(missing)
    if kind is not None and Requirement.GPU_KERNELS in missing and not kind.accelerator_activity:
        missing.discard(Requirement.NVIDIA_GPU)  # implied: there is no GPU work at all
    parts: list[str] = []
    for req in sorted(missing, key=lambda r: r.value):
        text = _MISSING_TEXT.get(req, f"needs {req.value}")
        why = _kind_reason(req, kind) if kind is not None else None
        if why is not None:
            text = why
        elif req in _RUN_ONLY and run is None:
            text += ": this is a raw trace"
        elif req is Requirement.NVML and run is not None:
            reason = getattr(run, "nvml_reason", None)
            text += f": {reason}" if reason else ": none were recorded in this run"
        elif req in _RUN_ONLY:
            text += ": not recorded in this run"
        parts.append(text)
    return "; ".join(parts)


def _kind_reason(req: Requirement, kind: TraceKind) -> str | None:
    """Why `req` is missing, in the words of what the trace is (None: the generic text says it)."""
    if req is Requirement.TRAINING:
        if kind.workload is Workload.INFERENCE:
            return "inference run: no optimizer step or backward pass in the trace"
        return f"cannot tell training from inference: {kind.workload_evidence}"
    if req is Requirement.NVIDIA_GPU:
        if kind.vendor is Vendor.AMD:
            return "AMD GPU (ROCm): CUDA-specific advice does not apply"
        if kind.vendor is Vendor.MTIA:
            return "MTIA accelerator: CUDA-specific advice does not apply"
        if kind.vendor is Vendor.OTHER:
            return "non-NVIDIA accelerator: CUDA-specific advice does not apply"
        return None
    if req is Requirement.GPU_KERNELS:
        if kind.vendor is Vendor.MTIA:
            return "needs GPU kernels: MTIA device events are not analyzed as GPU kernels"
        if kind.launches_without_kernels:
            return (
                f"needs GPU kernels: none were recorded although the host made {kind.launches_without_kernels:,} "
                "launch calls (CUPTI unavailable or GPU activity not enabled)"
            )
        if not kind.has_events:
            return "needs GPU kernels: the trace holds no events"
        return "needs GPU kernels: CPU-only trace" if kind.cpu_only else None
    if req is Requirement.STEADY_STATE and kind.capture_in_window:
        return (
            f"{kind.capture_api_word()} graph capture in the analyzed steps: {kind.captured_launches:,} launches were "
            "recorded into a graph and never ran, so host time against GPU time says nothing about batch size or "
            "launch overhead"
        )
    return None


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------

ContextFactory = Callable[[Mapping[str, float]], RuleContext]


class _ContainedExit(Exception):
    """A SystemExit/KeyboardInterrupt/GeneratorExit a rule raised itself, carried as an ordinary error."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


@contextlib.contextmanager
def _real_interrupts() -> Iterator[Callable[[], bool]]:
    """Tell the user's Ctrl-C (SIGINT delivered) from a KeyboardInterrupt a rule raises itself. Only
    in the main thread with Python's default SIGINT handler; where SIGINT is ignored (a process started
    in the background by a shell without job control, or under nohup) no Ctrl-C can arrive, so every
    KeyboardInterrupt is the rule's; elsewhere every KeyboardInterrupt counts as the user's."""
    seen = {"sigint": False}
    swapped = False
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield lambda: False
        return
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:

        def on_sigint(signum: int, frame: Any) -> None:
            seen["sigint"] = True
            raise KeyboardInterrupt

        signal.signal(signal.SIGINT, on_sigint)
        swapped = True
    try:
        yield (lambda: seen["sigint"]) if swapped else (lambda: True)
    finally:
        if swapped:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _internal_error_finding(rule: type[Rule], err: BaseException) -> Finding:
    frames = traceback.extract_tb(err.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    message = f"rule {rule.id} ({rule.name}) raised {type(err).__name__}{where}" + (
        f": {text}" if text else ""
    )
    return Finding(
        rule=rule.id,
        name=rule.name,
        category=Category.INTERNAL,
        severity=Severity.INFO,
        impact=None,
        title=f"Internal error in rule {rule.id}",
        message=message,
        evidence={"exception": type(err).__name__, "detail": text},
        recommendation="This is a bug in the rule, not in your script; the other rules ran. "
        "Please report it with this message.",
    )


def run_rules(
    ctx_factory: ContextFactory,
    rules: Sequence[type[Rule]],
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    thresholds: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[list[Finding], list[RuleStatus]]:
    """Run the selected rules. `ctx_factory(thresholds)` builds the context of one rule (all rules share
    the trace, metrics and run; each gets its own thresholds). Returns (findings, statuses): one status
    per rule, "ran" / "not_applicable" / "error" / "deselected". Never raises for a rule's bug."""
    selected, deselected = select_rules(rules, select, ignore)
    resolved = resolve_thresholds(rules, thresholds)
    findings: list[Finding] = []
    statuses = [RuleStatus(r.id, r.name, "deselected", "not selected") for r in deselected]
    for rule in selected:
        ctx = ctx_factory(resolved[rule.id])
        missing = frozenset(rule.requires) - ctx.available
        if missing:
            statuses.append(
                RuleStatus(rule.id, rule.name, "not_applicable", describe_missing(missing, ctx.run, ctx.trace))
            )
            continue
        try:
            with _real_interrupts() as interrupted:
                try:
                    produced = list(rule().check(ctx))
                except (SystemExit, KeyboardInterrupt, GeneratorExit) as exc:
                    if isinstance(exc, KeyboardInterrupt) and interrupted():
                        raise  # the user's Ctrl-C: the CLI exits 130
                    # a rule that calls sys.exit() or raises KeyboardInterrupt itself must not end the
                    # analysis (a CI gate would pass on empty output): it is that rule's internal error
                    raise _ContainedExit(exc) from exc
            for item in produced:
                if not isinstance(item, Finding):
                    raise TypeError(f"check() yielded {type(item).__name__}, not Finding")
        except Exception as err:
            finding = _internal_error_finding(rule, err.exc if isinstance(err, _ContainedExit) else err)
            findings.append(finding)
            statuses.append(RuleStatus(rule.id, rule.name, "error", finding.message))
            continue
        findings.extend(produced)
        statuses.append(RuleStatus(rule.id, rule.name, "ran", f"{len(produced)} finding(s)"))
    statuses.sort(key=lambda s: s.rule)
    return findings, statuses


def make_context(
    trace: TraceModel,
    run: RunInfo | None = None,
    metrics: Metrics | None = None,
    *,
    traces: Sequence[TraceModel] = (),
) -> tuple[Metrics, frozenset[Requirement], ContextFactory]:
    """Compute metrics (unless given) and requirements, and return a context factory for run_rules."""
    if metrics is None:
        metrics = compute_metrics(trace, run)
    ranks = max(1, len(traces))
    available = available_requirements(trace, run, metrics, ranks=ranks)
    all_traces = tuple(traces) or (trace,)
    final_metrics = metrics

    def factory(thresholds: Mapping[str, float]) -> RuleContext:
        return RuleContext(
            trace=trace,
            metrics=final_metrics,
            run=run,
            available=available,
            thresholds=dict(thresholds),
            traces=all_traces,
        )

    return metrics, available, factory


def run_single_rule(
    rule_cls: type[Rule],
    trace: TraceModel,
    run: RunInfo | None = None,
    thresholds: Mapping[str, float] | None = None,
    *,
    metrics: Metrics | None = None,
    traces: Sequence[TraceModel] = (),
    raise_errors: bool = True,
) -> list[Finding]:
    """Run one rule on one trace (tests, notebooks). Returns [] when the rule is not applicable.
    With raise_errors (the default, for tests) a rule's exception propagates instead of becoming an
    internal-error finding, so a test shows the real traceback."""
    validate_rule(rule_cls, rule_cls.__module__)
    overrides = {rule_cls.id: dict(thresholds)} if thresholds else None
    resolved = resolve_thresholds([rule_cls], overrides)[rule_cls.id]
    _, available, factory = make_context(trace, run, metrics, traces=traces)
    ctx = factory(resolved)
    if frozenset(rule_cls.requires) - available:
        return []
    if raise_errors:
        return list(rule_cls().check(ctx))
    findings, _ = run_rules(factory, [rule_cls], thresholds=overrides)
    return findings
