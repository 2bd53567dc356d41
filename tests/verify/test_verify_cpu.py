"""`gpuadvisor verify` end to end on the CPU: real `profile` runs of the fixture, real trial processes.

The fixture's numbers are synthetic by construction (sleeps stand in for file decoding and for the
device's share of a step), so the expected outcome is known: a DataLoader whose samples cost 2 ms each
with num_workers=0 gains from a worker, a loop that already runs well does not, a Dataset that refuses
worker processes and a sum-reduced loss at the edge of stability break their remedies.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from verify_helpers import LOADER, gpuadvisor, profile, tree_hashes, trial, verify

pytestmark = pytest.mark.slow

SHORT = ["--warmup-steps", "5", "--steps", "15"]


@pytest.fixture(scope="module")
def slow_loader_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Per sample 2 ms of loading, 16 ms of simulated device time per step, num_workers=0."""
    run = tmp_path_factory.mktemp("slow") / "run"
    return profile(run, LOADER, "--sample-ms", "2", "--step-ms", "16", "--steps", "60")


def test_dataloader_workers_measured_gain(slow_loader_run: Path) -> None:
    before = tree_hashes(slow_loader_run)
    r, doc = verify(slow_loader_run, "--only", "dataloader_workers", *SHORT)
    assert r.returncode == 0, r.stderr
    assert doc["baseline"]["status"] == "ok" and doc["baseline"]["trials"] == 3
    assert doc["baseline"]["step_detection"] == "optimizer_step_hook"
    t = trial(slow_loader_run, "dataloader_workers")
    assert t["status"] == "ok" and t["trials"] == 3 and t["category"] == "data_loading"
    assert t["verdict"] == "faster" and t["low"] > 1.2 and t["speedup"] > 1.3
    assert t["samples_per_s"] > doc["baseline"]["samples_per_s"]
    assert t["change"].startswith("num_workers=0 -> ")
    assert "train_loader.py:" in t["change"]
    # progress lines on stderr, one per trial
    assert "verify: trial 2/6 dataloader_workers ... " in r.stderr and "ms/step" in r.stderr
    # the run directory gained verify.json and nothing else changed
    after = tree_hashes(slow_loader_run)
    assert set(after) - set(before) == {"verify.json"}
    assert {k: after[k] for k in before} == before


def test_cpu_run_has_a_dataloader_finding_with_its_remedy(slow_loader_run: Path) -> None:
    from gpuadvisor.analysis import analyze

    found = [f for f in analyze(slow_loader_run).findings if f.rule == "GA301"]
    assert found and found[0].remedy == "dataloader_workers"


def test_a_script_that_runs_well_gets_no_claimed_gain(tmp_path: Path) -> None:
    run = profile(tmp_path / "run", LOADER, "--step-ms", "10", "--steps", "60")
    r, doc = verify(run, "--only", "dataloader_workers", *SHORT)
    assert r.returncode == 0, r.stderr
    assert doc["baseline"]["status"] == "ok"
    t = trial(run, "dataloader_workers")
    assert t["status"] == "ok" and t["trials"] == 3
    assert t["verdict"] != "faster", t
    assert t["low"] < 1.02, t


def test_breaking_trials_are_failed_and_the_run_is_untouched(tmp_path: Path) -> None:
    # sum-reduced loss with lr 0.03 converges at batch 8 (factor -0.92 per step) and diverges at
    # batch 32 (factor -6.7): Inf within 50 steps, then NaN
    run = profile(
        tmp_path / "run", LOADER, "--fail-in-worker", "--loss", "sum", "--lr", "0.03", "--steps", "200"
    )
    before = tree_hashes(run)
    r, doc = verify(
        run, "--only", "dataloader_workers", "--only", "larger_batch", "--trials", "1",
        "--warmup-steps", "5", "--steps", "60",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert doc["baseline"]["status"] == "ok" and doc["baseline"]["trials"] == 1
    workers = trial(run, "dataloader_workers")
    assert workers["status"] == "failed" and "speedup" not in workers
    assert "RuntimeError: this dataset cannot run in a DataLoader worker" in workers["reason"]
    assert any("cannot run in a DataLoader worker" in line for line in workers["log_tail"])
    batch = trial(run, "larger_batch")
    assert batch["status"] == "failed" and "speedup" not in batch
    assert "hold NaN/Inf" in batch["reason"]
    assert batch["change"].startswith("batch_size=8 -> 32")
    after = tree_hashes(run)
    assert set(after) - set(before) == {"verify.json"} and {k: after[k] for k in before} == before


def test_budget_skips_the_remaining_trials(slow_loader_run: Path, tmp_path: Path) -> None:
    r, doc = verify(slow_loader_run, "--only", "dataloader_workers", "--budget", "1", *SHORT)
    assert r.returncode == 0, r.stderr
    assert doc["baseline"]["trials"] == 1
    t = trial(slow_loader_run, "dataloader_workers")
    assert t["status"] == "skipped" and "budget" in t["reason"]
    assert any("--budget 1 s reached after 1 of 6 trials" in n for n in doc["notes"])


def test_profile_verify_writes_verified_findings(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = gpuadvisor(
        "profile", "-o", str(run), "--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "3",
        "--verify", "--verify-only", "dataloader_workers", "--verify-trials", "2",
        str(LOADER), "--sample-ms", "2", "--step-ms", "16", "--steps", "60",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads((run / "verify.json").read_text())
    assert doc["settings"]["trials"] == 2 and doc["trials"][0]["status"] == "ok"
    assert (run / "findings.json").is_file() and (run / "report.html").is_file()
    # analyzed once, after verify
    assert r.stderr.count("gpuadvisor: report: ") == 1
    assert r.stderr.index("verify: wrote") < r.stderr.index("gpuadvisor: report: ")


def test_usage_errors(tmp_path: Path) -> None:
    r = gpuadvisor("verify", str(tmp_path))
    assert r.returncode == 2 and "not a run directory" in r.stderr
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(
        json.dumps(
            {
                "target": {"kind": "script", "path_or_name": "gone.py", "argv": ["gone.py"]},
                "cwd": str(tmp_path),
            }
        )
    )
    r = gpuadvisor("verify", str(run))
    assert r.returncode == 2 and "script not found" in r.stderr
    r = gpuadvisor("verify", str(run), "--trials", "0")
    assert r.returncode == 2


def test_nothing_to_measure_says_so(slow_loader_run: Path, tmp_path: Path) -> None:
    # verify reads RUN/findings.json when present: a run whose analysis found nothing injectable
    run = tmp_path / "run"
    shutil.copytree(slow_loader_run, run)
    (run / "findings.json").write_text(json.dumps({"schema_version": 1, "findings": []}))
    r, doc = verify(run)
    assert r.returncode == 0, r.stderr
    assert doc["trials"] == [] and doc["baseline"]["status"] == "not_run"
    assert any(n.startswith("nothing to measure") for n in doc["notes"])
    assert "verify: nothing to measure" in r.stderr
