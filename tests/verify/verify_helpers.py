"""Helpers for the verify tests: run `gpuadvisor profile` / `verify` and single trial children."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).parent / "scripts"
LOADER = SCRIPTS / "train_loader.py"
# A short capture: the verify tests need the run directory, not a long trace.
FAST_PROFILE = ["--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "3", "--no-analyze", "-q"]


def gpuadvisor(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuadvisor", *args], capture_output=True, text=True, timeout=timeout
    )


def profile(out: Path, script: Path, *script_args: str) -> Path:
    r = gpuadvisor("profile", "-o", str(out), *FAST_PROFILE, str(script), *script_args)
    assert r.returncode == 0, r.stderr
    return out


def verify(run: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    r = gpuadvisor("verify", str(run), *args)
    doc = json.loads((run / "verify.json").read_text()) if (run / "verify.json").is_file() else {}
    return r, doc


def trial(run_dir: Path, remedy: str | None) -> dict[str, Any]:
    """The one trial entry of verify.json for `remedy`."""
    doc = json.loads((run_dir / "verify.json").read_text())
    found = [t for t in doc["trials"] if t["remedy"] == remedy]
    assert len(found) == 1, doc["trials"]
    entry: dict[str, Any] = found[0]
    return entry


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` (relative path -> digest)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def run_trial_child(
    tmp: Path,
    script: Path,
    script_args: list[str],
    remedies: tuple[str, ...],
    *,
    env: dict[str, str] | None = None,
    **config: Any,
) -> dict[str, Any]:
    """Run one trial child directly (the parent's planning is bypassed) and return its result."""
    from gpuadvisor.verify.trial import TrialConfig

    tag = "_".join(remedies) or "baseline"
    result = tmp / f"{tag}.result.json"
    cfg = TrialConfig(
        target={"kind": "script", "path_or_name": str(script), "argv": script_args},
        result=str(result),
        remedies=remedies,
        **{"warmup_steps": 2, "steps": 4, "num_workers": 2, "batch_multiplier": 4, **config},
    )
    cfg_path = tmp / f"{tag}.config.json"
    cfg_path.write_text(json.dumps(cfg.to_json()))
    r = subprocess.run(
        [sys.executable, "-m", "gpuadvisor.verify.trial", str(cfg_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(result.read_text())
    out["_stderr"] = r.stderr
    return out
