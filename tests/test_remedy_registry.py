"""The remedy registry is complete: every remedy is one record with every part, and each side that
carries records out (the replay's transformations, verify's injections and record checks, the docs)
has exactly the functions the records promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuadvisor.model import Category
from gpuadvisor.remedies import (
    COMPOSITE,
    REMEDIES,
    Injection,
    NotInjectable,
    NotReplayed,
    RemedyId,
    Replay,
    Safety,
    markdown_table,
    verify_table,
)
from gpuadvisor.stepmodel.predict import APPLY_ORDER, TRANSFORMS
from gpuadvisor.verify.inject import INJECTORS
from gpuadvisor.verify.plan import ALL_SAFE_DEFAULT, IMPLEMENTED, REMEDY_CATEGORY, RULE_REMEDIES, SKIP_CHECKS

ROOT = Path(__file__).resolve().parents[1]


def test_every_remedy_id_has_one_record() -> None:
    assert set(REMEDIES) == set(RemedyId)
    assert all(spec.id is rid for rid, spec in REMEDIES.items())


@pytest.mark.parametrize("remedy", list(RemedyId), ids=lambda r: r.value)
def test_a_record_has_every_part(remedy: RemedyId) -> None:
    spec = REMEDIES[remedy]
    assert spec.title.strip()
    assert spec.category == COMPOSITE or spec.category in {c.value for c in Category}
    assert isinstance(spec.safety, Safety)
    assert isinstance(spec.order, int)
    # the replay: a transformation, or an explicit reason why there is none
    if isinstance(spec.replay, Replay):
        assert spec.replay.how.strip()
    else:
        assert isinstance(spec.replay, NotReplayed) and spec.replay.reason.strip()
        if "not modeled yet" in spec.replay.reason:
            assert spec.replay.pending_issue is not None, "a placeholder names the issue that fills it"
    # the injection: how, when skipped, its levers; or an explicit "none: ..."
    if isinstance(spec.injection, Injection):
        assert spec.injection.how.strip() and spec.injection.skipped_when.strip()
        assert spec.injection.levers, "an injectable remedy has at least the lever verify tries for it"
        assert all(lv.name and lv.title for lv in spec.injection.levers)
    else:
        assert isinstance(spec.injection, NotInjectable)
        assert spec.injection.reason.startswith("none: ")


def test_orders_and_lever_names_are_unique() -> None:
    orders = [s.order for s in REMEDIES.values()]
    assert len(orders) == len(set(orders))
    names = [lv.name for s in REMEDIES.values() for lv in s.levers]
    assert len(names) == len(set(names))


def test_the_replay_side_has_exactly_the_promised_transformations() -> None:
    replayed = {r for r, s in REMEDIES.items() if isinstance(s.replay, Replay)}
    assert set(TRANSFORMS) == replayed
    assert list(APPLY_ORDER) == sorted(replayed, key=lambda r: REMEDIES[r].order)


def test_the_verify_side_has_exactly_the_promised_injections_and_checks() -> None:
    injectable = {r for r, s in REMEDIES.items() if isinstance(s.injection, Injection)}
    assert set(INJECTORS) == injectable == set(IMPLEMENTED)
    assert set(SKIP_CHECKS) == injectable
    # the tables verify used to keep by hand are projections of the records
    assert all(REMEDIES[r].category == c for r, c in REMEDY_CATEGORY.items())
    assert all(REMEDIES[r].safety is Safety.SAFE and r in injectable for r in ALL_SAFE_DEFAULT)
    assert RemedyId.TORCH_COMPILE not in ALL_SAFE_DEFAULT  # minutes of warm-up; fails on some models
    assert RULE_REMEDIES["GA701"] == (RemedyId.BF16_AUTOCAST, RemedyId.TF32)
    assert all(set(rs) <= injectable for rs in RULE_REMEDIES.values())


def test_safety_classes_say_what_the_remedy_changes() -> None:
    assert REMEDIES[RemedyId.LARGER_BATCH].changes_batch and REMEDIES[RemedyId.LARGER_BATCH].changes_numerics
    assert REMEDIES[RemedyId.BF16_AUTOCAST].changes_numerics
    assert not REMEDIES[RemedyId.BF16_AUTOCAST].changes_batch
    assert not REMEDIES[RemedyId.PERSISTENT_WORKERS].changes_numerics


def test_the_analysis_side_imports_neither_torch_nor_the_injections() -> None:
    code = (
        "import sys; import gpuadvisor.remedies, gpuadvisor.stepmodel.predict, gpuadvisor.verify.plan; "
        "bad = [m for m in ('torch', 'gpuadvisor.verify.inject', 'gpuadvisor.verify.trial') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_docs_remedies_md_is_generated_from_the_registry() -> None:
    doc = (ROOT / "docs" / "remedies.md").read_text(encoding="utf-8")
    assert doc == markdown_table(), "regenerate: python -m gpuadvisor.remedies > docs/remedies.md"


def test_docs_verify_md_table_is_generated_from_the_registry() -> None:
    doc = (ROOT / "docs" / "verify.md").read_text(encoding="utf-8")
    assert verify_table() in doc, "regenerate: python -m gpuadvisor.remedies --verify-table (into docs/verify.md)"
