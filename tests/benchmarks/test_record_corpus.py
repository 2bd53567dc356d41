"""benchmarks/record_corpus.py on the CPU (`--tiny`): two workloads recorded planted and fixed (a control
only planted) with `gpuadvisor profile --no-analyze`, packed into one tarball with a README per run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

from catalog import by_name  # noqa: E402
from record_corpus import pack, profile_command, run_readme  # noqa: E402

ENV = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")


@pytest.mark.slow  # two workloads under `gpuadvisor profile` (~28 s on 2 loaded cores): not the quick tier
def test_record_two_workloads_tiny_into_a_tarball(tmp_path: Path) -> None:
    measured = tmp_path / "m.jsonl"
    measured.write_text(json.dumps({"record": "variant", "workload": "sync_bound", "variant": "planted",
                                    "samples_per_s_median": 1234.0, "spread": 0.02, "n_ok": 3}) + "\n"
                        + json.dumps({"record": "variant", "workload": "sync_bound", "variant": "remove_host_syncs",
                                      "samples_per_s_median": 2468.0, "speedup_median": 2.0, "speedup_min": 1.9,
                                      "speedup_max": 2.1}) + "\n")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(BENCH / "record_corpus.py"), str(out), "--tiny", "--tar",
                           "--workloads", "sync_bound,control_transformer", "--measurements", str(measured)],
                          capture_output=True, text=True, timeout=600, env=ENV, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:] + (out / "record.log").read_text()[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["record.log", "record.tar.gz"]
    with tarfile.open(out / "record.tar.gz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    runs = tmp_path / "x" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == [
        "control_transformer-planted", "sync_bound-fixed", "sync_bound-planted"]
    for run in runs.iterdir():
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["capture"]["state"] == "complete"
        # The catalog's windows: sync_bound is launch-heavy (3 recorded steps), the control gets 5.
        assert manifest["capture"]["active_steps"] == (3 if run.name.startswith("sync_bound") else 5)
        assert (run / "trace" / "rank0.json.gz").stat().st_size > 0
        assert sum(p.stat().st_size for p in run.rglob("*") if p.is_file()) < 500_000
    readme = (runs / "sync_bound-planted" / "README.md").read_text()
    assert "torch / Python | 2." in readme and "`python3 -m gpuadvisor profile --no-analyze -o runs/sync_bound-planted" in readme
    assert "host_sync (`--fix remove_host_syncs`" in readme and "planted 1,234" in readme and "2.00x" in readme
    assert "Planted problem: host_sync" in readme  # the docstring
    assert "fixes applied | `--fix remove_host_syncs`" in (runs / "sync_bound-fixed" / "README.md").read_text()
    assert "none (well-tuned control)" in (runs / "control_transformer-planted" / "README.md").read_text()

    # Measured later: the READMEs of the unpacked run directories are rewritten with the new numbers.
    measured.write_text(measured.read_text().replace("1234.0", "4321.0"))
    again = subprocess.run([sys.executable, str(BENCH / "record_corpus.py"), str(tmp_path / "x"), "--readmes-only",
                            "--measurements", str(measured)], capture_output=True, text=True, timeout=120, env=ENV)
    assert again.returncode == 0, again.stderr
    assert "planted 4,321" in (runs / "sync_bound-planted" / "README.md").read_text()


def test_pack_splits_archives_at_the_size_limit(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for name in ("a-planted", "a-fixed", "b-planted"):
        (runs / name / "trace").mkdir(parents=True)
        (runs / name / "trace" / "rank0.json.gz").write_bytes(os.urandom(40_000))
    parts = pack(runs, tmp_path, "record-s1of2", max_bytes=90_000)
    assert [p.name for p in parts] == ["record-s1of2.tar.gz", "record-s1of2-part2.tar.gz"]
    names = []
    for part in parts:
        with tarfile.open(part) as tar:
            names += [m.name for m in tar.getmembers() if m.name.endswith(".gz")]
    assert sorted(names) == sorted(f"runs/{n}/trace/rank0.json.gz" for n in ("a-planted", "a-fixed", "b-planted"))


def test_readme_of_a_failed_run_says_what_is_missing(tmp_path: Path) -> None:
    w = by_name(["tutorial_cnn"])[0]
    v = w.recorded_variants()[1]
    cmd = profile_command(w, v, str(tmp_path / "tutorial_cnn-fixed"), "/usr/bin/python3", tiny=False)
    assert cmd[-1] == "--fixed" and "--no-analyze" in cmd and cmd[cmd.index("--steps") + 1] == "60"
    (tmp_path / "tutorial_cnn-fixed").mkdir()
    text = run_readme(tmp_path / "tutorial_cnn-fixed", w, v, cmd, {})
    assert "| GPU | none (CPU run) |" in text and "| driver | n/a |" in text
    assert "small_batch (`--fix larger_batch`" in text and "measured samples/s" not in text
