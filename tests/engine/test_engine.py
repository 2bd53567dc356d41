"""Engine tests: loading (folders, entry points, broken files), validation, selection, thresholds,
requirements and error containment. The rules here are small test rules written into tmp folders;
the contexts are built without any trace (the engine never looks inside ctx.trace itself)."""

from __future__ import annotations

import signal
import sys
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor import engine
from gpuadvisor.errors import ConfigError
from gpuadvisor.model import Category, Severity
from gpuadvisor.rules_api import Requirement, Rule, RuleContext

DOC = '''"""Test rule {rid}.

    Why it matters
    --------------
    Because.

    How it is detected
    ------------------
    Somehow.

    How to fix
    ----------
    Like this::

        x = 1
    """'''


def rule_source(
    rid: str = "XT001",
    name: str = "test-rule",
    *,
    category: str = "Category.HOST_SYNC",
    requires: str = "frozenset()",
    body: str = "yield self.finding(impact=ctx.threshold('limit'), title='t', message='m', evidence={}, recommendation='r')",
    doc: str | None = None,
    extra: str = "",
) -> str:
    """Source of one test rule class (values are spliced in as Python expressions)."""
    doc_text = doc if doc is not None else DOC.format(rid=rid)
    lines = [
        "from gpuadvisor.rules_api import Category, Requirement, Rule, Threshold",
        "",
        f"class R_{rid.replace('-', '_')}(Rule):",
        "    " + doc_text,
        f"    id = {rid!r}",
        f"    name = {name!r}",
        f"    category = {category}",
        f"    requires = {requires}",
        '    thresholds = {"limit": Threshold(0.3, "a limit", "fraction")}',
        f"    aliases = ('OLD{rid}',)",
        f"    {extra}",
        "",
        "    def check(self, ctx):",
        f"        {body}",
        "",
    ]
    return "\n".join(lines)


def write_rule(folder: Path, filename: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(source)
    return path


def load_user(folder: Path) -> list[type[Rule]]:
    return [r.cls for r in engine.load_rules([folder], builtin=False, entry_points=False)]


def ctx_factory(available: frozenset[Requirement] = frozenset(), run: Any = None) -> engine.ContextFactory:
    def factory(thresholds: Any) -> RuleContext:
        return RuleContext(
            trace=None, metrics=None, run=run, available=available, thresholds=dict(thresholds)
        )  # type: ignore[arg-type]

    return factory


# ---- loading ----------------------------------------------------------------------------------------


def test_user_folder_rules_load_by_path_with_unique_module_names(tmp_path: Path) -> None:
    write_rule(tmp_path / "a", "rules.py", rule_source("XA001", "rule-a"))
    write_rule(tmp_path / "b", "rules.py", rule_source("XB001", "rule-b"))
    write_rule(tmp_path / "b", "_helper.py", "raise RuntimeError('never imported: starts with _')")
    loaded = engine.load_rules([tmp_path / "a", tmp_path / "b"], builtin=False, entry_points=False)
    assert [r.id for r in loaded] == ["XA001", "XB001"]
    assert loaded[0].cls.__module__ != loaded[1].cls.__module__
    assert all(r.origin == "user" and r.source.endswith("rules.py") for r in loaded)
    # loading twice reuses the modules: the same class objects
    again = engine.load_rules([tmp_path / "a"], builtin=False, entry_points=False)
    assert again[0].cls is loaded[0].cls


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write_rule(tmp_path, "bad.py", "x = 1\ndef broken(:\n")
    with pytest.raises(engine.RuleLoadError, match=r"bad\.py:2: syntax error") as info:
        load_user(tmp_path)
    assert info.value.exit_code == 2
    assert str(path) in str(info.value)


def test_import_time_exception_names_file(tmp_path: Path) -> None:
    write_rule(tmp_path, "boom.py", "import json\nraise ValueError('nope')\n")
    with pytest.raises(engine.RuleLoadError, match=r"boom\.py:2: ValueError: nope"):
        load_user(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"doc": '"""Only a summary."""'}, "docstring must have"),
        ({"category": '"host_sync"'}, "category"),
        ({"rid": "ga-1"}, "id"),
        ({"name": "Not Kebab"}, "name"),
        ({"requires": '{"nvml"}'}, "requires"),
        ({"extra": 'thresholds = {"limit": 0.3}'}, "Threshold"),
    ],
)
def test_invalid_rule_is_a_clear_error(tmp_path: Path, kwargs: dict[str, str], why: str) -> None:
    write_rule(tmp_path, "r.py", rule_source(**kwargs))
    with pytest.raises(engine.RuleLoadError, match=why) as info:
        load_user(tmp_path)
    assert "r.py" in str(info.value)


def test_rule_without_check_is_rejected(tmp_path: Path) -> None:
    source = rule_source().replace("def check(self, ctx):", "def other(self, ctx):")
    write_rule(tmp_path, "r.py", source)
    with pytest.raises(engine.RuleLoadError, match="does not implement check"):
        load_user(tmp_path)


def test_duplicate_id_or_name_across_folders(tmp_path: Path) -> None:
    write_rule(tmp_path / "a", "one.py", rule_source("XA001", "same-name"))
    write_rule(tmp_path / "b", "two.py", rule_source("XA002", "same-name"))
    with pytest.raises(engine.RuleLoadError, match="reuses 'same-name'"):
        engine.load_rules([tmp_path / "a", tmp_path / "b"], builtin=False, entry_points=False)


def test_missing_rules_folder(tmp_path: Path) -> None:
    with pytest.raises(engine.RuleLoadError, match="does not exist"):
        load_user(tmp_path / "nope")


def test_builtin_rules_load_and_are_valid() -> None:
    loaded = engine.load_rules(entry_points=False)
    ids = [r.id for r in loaded]
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    for rid in ("GA001", "GA101", "GA102", "GA103", "GA201", "GA202", "GA203", "GA301"):
        assert rid in ids
    assert all(r.origin == "builtin" for r in loaded)
    assert engine.builtin_rules_dir().is_dir()


def test_entry_point_module_and_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_rule(
        tmp_path, "ga_plugin_mod.py", rule_source("XP001", "plugin-a") + rule_source("XP002", "plugin-b")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [
        EntryPoint(name="mod", value="ga_plugin_mod", group=engine.ENTRY_POINT_GROUP),
        EntryPoint(name="cls", value="ga_plugin_mod:R_XP001", group=engine.ENTRY_POINT_GROUP),
    ]
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: eps)
    # The class entry point repeats a rule of the module: same class, so not a duplicate.
    loaded = engine.load_rules(builtin=False)
    assert sorted({r.id for r in loaded}) == ["XP001", "XP002"]
    assert all(r.origin == "entry_point" for r in loaded)
    bad = [EntryPoint(name="bad", value="ga_plugin_mod:missing_attr", group=engine.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: bad)
    with pytest.raises(engine.RuleLoadError, match="entry point bad"):
        engine.load_rules(builtin=False)
    sys.modules.pop("ga_plugin_mod", None)


# ---- selection and thresholds ----------------------------------------------------------------------


@pytest.fixture
def three_rules(tmp_path: Path) -> list[type[Rule]]:
    write_rule(tmp_path, "a.py", rule_source("XS101", "alpha-rule", category="Category.HOST_SYNC"))
    write_rule(tmp_path, "b.py", rule_source("XS102", "beta-rule", category="Category.HOST_SYNC"))
    write_rule(tmp_path, "c.py", rule_source("XS201", "gamma-rule", category="Category.MEMORY"))
    return load_user(tmp_path)


@pytest.mark.parametrize(
    ("select", "ignore", "expected"),
    [
        ((), (), ["XS101", "XS102", "XS201"]),
        (("XS101",), (), ["XS101"]),
        (("beta-rule",), (), ["XS102"]),
        (("OLDXS201",), (), ["XS201"]),  # alias
        (("host_sync",), (), ["XS101", "XS102"]),  # category
        (("XS1",), (), ["XS101", "XS102"]),  # id prefix
        (("xs1",), ("xs102",), ["XS101"]),  # case-insensitive, ignore wins
        ((), ("memory",), ["XS101", "XS102"]),
    ],
)
def test_select_ignore(
    three_rules: list[type[Rule]], select: tuple[str, ...], ignore: tuple[str, ...], expected: list[str]
) -> None:
    selected, deselected = engine.select_rules(three_rules, select, ignore)
    assert [r.id for r in selected] == expected
    assert len(selected) + len(deselected) == 3


def test_unknown_selector_suggests(three_rules: list[type[Rule]]) -> None:
    with pytest.raises(ConfigError, match=r"unknown rule or category 'alpha-rul'.*alpha-rule"):
        engine.select_rules(three_rules, ["alpha-rul"])


def test_thresholds_by_id_and_name(three_rules: list[type[Rule]]) -> None:
    out = engine.resolve_thresholds(three_rules, {"XS101": {"limit": 0.1}, "beta-rule": {"limit": 2}})
    assert out["XS101"] == {"limit": 0.1}
    assert out["XS102"] == {"limit": 2.0}
    assert out["XS201"] == {"limit": 0.3}  # default


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"XS999": {"limit": 1}}, "unknown rule 'XS999'"),
        ({"XS101": {"limt": 1}}, r"unknown threshold of XS101.*limit"),
        ({"XS101": {"limit": "high"}}, "must be a finite number"),
        ({"XS101": {"limit": True}}, "must be a finite number"),
        ({"XS101": {"limit": float("nan")}}, "must be a finite number"),
    ],
)
def test_bad_thresholds(three_rules: list[type[Rule]], overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        engine.resolve_thresholds(three_rules, overrides)


# ---- running ---------------------------------------------------------------------------------------


def test_run_rules_statuses_not_applicable_and_error_containment(tmp_path: Path) -> None:
    write_rule(tmp_path, "ok.py", rule_source("XR001", "ok-rule"))
    write_rule(
        tmp_path, "nvml.py", rule_source("XR002", "needs-nvml", requires="frozenset({Requirement.NVML})")
    )
    write_rule(tmp_path, "boom.py", rule_source("XR003", "raises", body="raise KeyError('step_time_ms')"))
    write_rule(tmp_path, "junk.py", rule_source("XR004", "yields-junk", body="yield 42"))
    write_rule(tmp_path, "later.py", rule_source("XR005", "later-rule"))
    rules = load_user(tmp_path)
    findings, statuses = engine.run_rules(
        ctx_factory(), rules, ignore=["later-rule"], thresholds={"ok-rule": {"limit": 0.25}}
    )
    by_rule = {s.rule: s for s in statuses}
    assert [s.rule for s in statuses] == ["XR001", "XR002", "XR003", "XR004", "XR005"]
    assert by_rule["XR001"].status == "ran"
    assert by_rule["XR002"].status == "not_applicable"
    assert by_rule["XR002"].detail == "needs NVML samples: this is a raw trace"
    assert by_rule["XR003"].status == "error" and "KeyError" in by_rule["XR003"].detail
    assert by_rule["XR004"].status == "error" and "not Finding" in by_rule["XR004"].detail
    assert by_rule["XR005"].status == "deselected"
    ok = [f for f in findings if f.rule == "XR001"]
    assert len(ok) == 1 and ok[0].impact == 0.25 and ok[0].severity is Severity.HIGH
    internal = [f for f in findings if f.category is Category.INTERNAL]
    assert {f.rule for f in internal} == {"XR003", "XR004"}
    assert all(f.severity is Severity.INFO and f.impact is None for f in internal)
    assert "XR003" in internal[0].message and "step_time_ms" in internal[0].message


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_rule_that_raises_keyboardinterrupt_is_contained(tmp_path: Path, sigint: str) -> None:
    """A rule's own KeyboardInterrupt is its internal error, also where SIGINT is ignored (a test run or
    job started in the background by a shell without job control, or under nohup): there no Ctrl-C can
    arrive, and the analysis ended with "interrupted" (exit 130) instead (issue 30: the quick tier failed
    so when started with `(pytest ... &)`)."""
    write_rule(tmp_path, "kbd.py", rule_source("XK001", "kbd", body="raise KeyboardInterrupt"))
    write_rule(tmp_path, "ok.py", rule_source("XK002", "ok-rule"))
    rules = load_user(tmp_path)
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler if sigint == "default" else signal.SIG_IGN)
    try:
        findings, statuses = engine.run_rules(ctx_factory(), rules)
    finally:
        signal.signal(signal.SIGINT, before)
    by_rule = {s.rule: s for s in statuses}
    assert by_rule["XK001"].status == "error" and "KeyboardInterrupt" in by_rule["XK001"].detail
    assert by_rule["XK002"].status == "ran" and [f.rule for f in findings if f.rule == "XK002"]


def test_missing_nvml_in_a_run_explains_the_reason() -> None:
    class Run:
        nvml_reason = "NVML library not found"

    text = engine.describe_missing([Requirement.NVML, Requirement.GPU_KERNELS], Run())  # type: ignore[arg-type]
    assert text == "needs GPU kernels: the trace has none; needs NVML samples: NVML library not found"


def test_available_requirements_from_tables(tmp_path: Path) -> None:
    from types import SimpleNamespace

    import pandas as pd

    meta = SimpleNamespace(device_properties=[{"name": "GPU", "numSms": 132}], record_shapes=None)
    trace = SimpleNamespace(
        kernels=pd.DataFrame({"ts": [1.0]}),
        steps=pd.DataFrame({"step": [1, 2]}),
        step_source="profiler_step",
        meta=meta,
        cpu_ops=pd.DataFrame({"input_types": [None, "['float']"], "flops": [float("nan")] * 2}),
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "callsites.json").write_text("{}")
    run = SimpleNamespace(
        nvml=pd.DataFrame({"t_unix_s": [1.0, 1.1], "sm_clock_mhz": [None, 1980.0]}),
        environment={"settings": {"cudnn_benchmark": False}},
        callsites=[],
        run_dir=run_dir,
    )
    have = engine.available_requirements(trace, run)  # type: ignore[arg-type]
    assert have == {
        Requirement.GPU_KERNELS,
        Requirement.STEPS,
        Requirement.DEVICE_PROPERTIES,
        Requirement.RECORD_SHAPES,
        Requirement.NVML,
        Requirement.SETTINGS,
        Requirement.CALLSITES,
    }
    # RELIABILITY (issue 12): samples whose every reading is empty (a fake or broken NVML) are no samples
    run.nvml = pd.DataFrame({"t_unix_s": [1.0, 1.1], "sm_clock_mhz": [None, None], "power_w": [None, None]})
    assert Requirement.NVML not in engine.available_requirements(trace, run)  # type: ignore[arg-type]
    trace.step_source = "whole_trace"
    trace.kernels = pd.DataFrame({"ts": []})
    have = engine.available_requirements(trace, None, ranks=2)  # type: ignore[arg-type]
    assert Requirement.STEPS not in have and Requirement.GPU_KERNELS not in have
    assert Requirement.NVML not in have and Requirement.MULTI_RANK in have
