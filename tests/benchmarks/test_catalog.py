"""benchmarks/catalog.py against the scripts and gpuadvisor's vocabulary: every workload listed, every fix
flag accepted by its script, categories and remedy ids valid, the corpus as wide as the brief asks, the
calibration/holdout split balanced, the shard plan within its time budget."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from gpuadvisor.model import Category
from gpuadvisor.remedies import RemedyId

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

from catalog import CATALOG, EXCLUDED, Family, Split, Workload, balanced_split, by_name, shard  # noqa: E402
from measure import estimated_seconds, interleaved_runs  # noqa: E402

PERFORMANCE_CATEGORIES = {c.value for c in Category} - {"capture", "internal", "communication", "gpu_health"}
PLANTED = [w for w in CATALOG if not w.control]
CONTROLS = [w for w in CATALOG if w.control]


def declared_fixes(w: Workload) -> list[str]:
    """The `fixes=[...]` literal the script passes to add_workload_args (what its --fix accepts)."""
    tree = ast.parse((ROOT / w.script).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "add_workload_args":
            for kw in node.keywords:
                if kw.arg == "fixes":
                    value = ast.literal_eval(kw.value)
                    assert isinstance(value, list)
                    return [str(v) for v in value]
    raise AssertionError(f"{w.script} does not call add_workload_args(parser, fixes=[...], ...)")


def test_every_workload_script_is_in_the_catalog_or_excluded_with_a_reason() -> None:
    scripts = {p.stem for p in (BENCH / "workloads").glob("*.py") if not p.name.startswith("_")}
    listed = {w.name for w in CATALOG}
    assert len(listed) == len(CATALOG), "duplicate workload names"
    assert scripts == listed | set(EXCLUDED), (scripts - listed - set(EXCLUDED), listed - scripts)
    assert all(reason for reason in EXCLUDED.values())


@pytest.mark.parametrize("w", CATALOG, ids=[w.name for w in CATALOG])
def test_fix_flags_match_the_script(w: Workload) -> None:
    assert declared_fixes(w) == list(w.fixes)
    doc = ast.get_docstring(ast.parse((ROOT / w.script).read_text())) or ""
    assert doc, f"{w.script} has no docstring"
    for fix in w.fixes:
        assert f"--fix {fix}" in doc, f"{w.script}'s docstring does not say what --fix {fix} changes"
    if w.control:
        assert doc.startswith("Control"), w.name


@pytest.mark.parametrize("w", PLANTED, ids=[w.name for w in PLANTED])
def test_categories_and_remedies_are_gpuadvisor_vocabulary(w: Workload) -> None:
    remedies = {r.value for r in RemedyId} - {"all_safe"}
    for p in w.problems:
        assert p.category in PERFORMANCE_CATEGORIES, p
        assert p.remedy in remedies, p


def test_the_corpus_is_as_wide_as_planned() -> None:
    assert len(PLANTED) >= 24
    assert len(CONTROLS) >= 5
    two = [w for w in PLANTED if len(set(w.categories)) >= 2]
    assert len(two) >= 5, [w.name for w in two]
    assert {f.value for f in Family} <= {w.family.value for w in CATALOG}
    assert any(w.compiled and not w.control for w in CATALOG) and any(w.compiled and w.control for w in CATALOG)
    assert any(w.inference and not w.control for w in CATALOG) and any(w.inference and w.control for w in CATALOG)
    families_per_category: dict[str, set[str]] = defaultdict(set)
    for w in PLANTED:
        for c in w.categories:
            families_per_category[c].add(w.family.value)
    for category in PERFORMANCE_CATEGORIES:
        assert len(families_per_category[category]) >= 2, (category, families_per_category[category])


def test_the_split_is_the_frozen_greedy_assignment_and_balanced() -> None:
    assert balanced_split(CATALOG) == {w.name: w.split for w in CATALOG}
    halves = {s: [w for w in CATALOG if w.split is s] for s in Split}
    assert abs(len(halves[Split.CALIBRATION]) - len(halves[Split.HOLDOUT])) <= 1
    features = Counter(f for w in CATALOG for f in (w.family.value, *set(w.categories)))
    for feature, n in features.items():
        if n < 2:
            continue
        for split, members in halves.items():
            assert any(feature in (w.family.value, *w.categories) for w in members), (feature, split)
    for split, members in halves.items():
        assert any(w.control for w in members), split


def test_catalog_imports_without_torch() -> None:
    code = f"import sys; sys.path.insert(0, {str(BENCH)!r}); import catalog, measure, record_corpus; " \
           "assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_variants_and_interleaving() -> None:
    w = by_name(["tutorial_cnn"])[0]
    assert [v.name for v in w.variants()] == ["planted", "larger_batch", "remove_host_syncs", "fixed", "workers_8"]
    runs = interleaved_runs(w, 3)
    by_repeat = [[r.variant for r in runs if r.repeat == k] for k in range(3)]
    assert by_repeat[0] == ["planted", "larger_batch", "remove_host_syncs", "fixed", "workers_8"]
    assert by_repeat[1] == ["larger_batch", "remove_host_syncs", "fixed", "workers_8", "planted"]
    assert by_repeat[2] == ["remove_host_syncs", "fixed", "workers_8", "planted", "larger_batch"]
    # a probe may name the remedies it applies: then it is calibrated like a fix
    assert dict(w.probe_remedies) == {"workers_8": "dataloader_workers"}
    moe = by_name(["moe_nonzero"])[0]
    assert dict(moe.probe_remedies)["static_compiled"].split("+") == ["static_shapes", "torch_compile"]
    probe = by_name(["triton_loss"])[0]
    assert [v.name for v in probe.variants()] == ["planted", "fix_kernel_grid", "batch_x4"]
    control = by_name(["control_convnet"])[0]
    assert [v.name for v in control.variants()] == ["planted"]
    assert [v.name for v in control.recorded_variants()] == ["planted"]
    with pytest.raises(KeyError, match="nope"):
        by_name(["nope"])


def test_shards_partition_the_catalog_and_fit_the_time_budget() -> None:
    cost = {w.name: estimated_seconds(w, 3, 1.2) for w in CATALOG}
    # four shards since the busy-time and periodic-cost workloads of issues 27 and 31 (three before)
    parts = [shard(CATALOG, i, 4, cost) for i in (1, 2, 3, 4)]
    assert sorted(w.name for p in parts for w in p) == sorted(w.name for w in CATALOG)
    assert parts == [shard(CATALOG, i, 4, cost) for i in (1, 2, 3, 4)]  # deterministic
    loads = [sum(cost[w.name] for w in p) for p in parts]
    assert max(loads) - min(loads) <= max(cost.values())
    # The plan the GPU commands rely on: each shard's estimate within 9 minutes (measure and record).
    assert max(loads) < 540, loads
    record_cost = {w.name: w.record.est_run_s * len(w.recorded_variants()) for w in CATALOG}
    # four recording shards since issue 41's workloads (three before)
    assert max(sum(record_cost[w.name] for w in shard(CATALOG, i, 4, record_cost)) for i in (1, 2, 3, 4)) < 480
    with pytest.raises(ValueError):
        shard(CATALOG, 3, 2, cost)
