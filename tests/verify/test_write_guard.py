"""The write guard of verify's trials (gpuadvisor/verify/guard.py) and the scratch copy it guards
(gpuadvisor/verify/scratch.py), on SYNTHETIC folders. The guard installs an audit hook that cannot be
removed, so it runs in a child process here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuadvisor.errors import UsageError
from gpuadvisor.verify import scratch
from gpuadvisor.verify.scratch import prepare

CHILD = textwrap.dedent(
    """
    import json, os, shutil, sys
    from gpuadvisor.verify import guard
    guard.install(json.loads(sys.argv[1]))
    os.chdir(sys.argv[2])
    out = {}
    def attempt(name, fn):
        try:
            fn()
            out[name] = "ok"
        except PermissionError as err:
            out[name] = "refused"
    def write(path, mode, text):
        with open(path, mode) as fh:
            fh.write(text)
    attempt("truncate-linked", lambda: write("big.bin", "w", "new"))
    attempt("append-linked", lambda: write("data.txt", "a", "+more"))
    attempt("relative", lambda: write("log.txt", "a", "line"))
    attempt("absolute-original", lambda: write(sys.argv[3] + "/log.txt", "a", "line"))
    attempt("outside", lambda: write(sys.argv[4], "w", "x"))
    attempt("remove-link", lambda: os.remove("gone.bin"))
    attempt("rename-into-original", lambda: os.rename("log.txt", sys.argv[3] + "/moved.txt"))
    attempt("rmtree-original", lambda: shutil.rmtree(sys.argv[3] + "/sub"))
    import torch
    attempt("torch-save-linked", lambda: torch.save({"a": 1}, "ckpt.pt"))
    attempt("torch-save-original", lambda: torch.save({"a": 1}, sys.argv[3] + "/ckpt.pt"))
    out["refused"] = guard.refused()
    print(json.dumps(out))
    """
)


def test_writes_stay_in_the_copy_and_linked_originals_are_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scratch, "LINK_FROM_BYTES", 10)  # files over 10 bytes are linked, as large files are
    original = tmp_path / "project"
    (original / "sub").mkdir(parents=True)
    (original / "sub" / "keep.txt").write_text("kept")
    for name in ("big.bin", "data.txt", "ckpt.pt", "gone.bin"):
        (original / name).write_text(f"the original {name}")
    (original / "log.txt").write_text("old")
    before = {p.name: p.read_bytes() for p in original.rglob("*") if p.is_file()}
    place = prepare(original, allow_writes=False, temp_root=str(tmp_path))
    assert set(place.linked) == {"big.bin", "data.txt", "ckpt.pt", "gone.bin"}
    outside = "/var/tmp/gpuadvisor-guard-test-must-not-exist"
    r = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(place.guard()), str(place.cwd), str(original), outside],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out == {
        "truncate-linked": "ok",
        "append-linked": "ok",
        "relative": "ok",
        "absolute-original": "refused",
        "outside": "refused",
        "remove-link": "ok",
        "rename-into-original": "refused",
        "rmtree-original": "refused",
        "torch-save-linked": "ok",
        "torch-save-original": "refused",
        "refused": [f"{original}/log.txt", outside, f"{original}/moved.txt", f"{original}/sub",
                    f"{original}/ckpt.pt"],
    }  # fmt: skip
    assert {p.name: p.read_bytes() for p in original.rglob("*") if p.is_file()} == before
    assert not os.path.exists(outside)
    copy = place.cwd
    assert (copy / "big.bin").read_text() == "new" and not (copy / "big.bin").is_symlink()
    assert (copy / "data.txt").read_text() == "the original data.txt+more"
    assert (copy / "log.txt").read_text() == "oldline" and not (copy / "gone.bin").exists()
    place.remove()
    assert not place.scratch or not place.scratch.exists()


def test_run_directories_and_tool_folders_are_not_copied(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "gpuadvisor-runs" / "a" / "trace").mkdir(parents=True)
    (project / "gpuadvisor-runs" / "a" / "manifest.json").write_text("{}")
    (project / ".venv" / "lib").mkdir(parents=True)
    (project / ".venv" / "pyvenv.cfg").write_text("home = /usr")
    (project / "pkg" / "__pycache__").mkdir(parents=True)
    (project / "pkg" / "mod.py").write_text("x = 1")
    place = prepare(project, allow_writes=False, temp_root=str(tmp_path))
    copy = place.cwd
    assert (copy / "pkg" / "mod.py").read_text() == "x = 1" and not (copy / "pkg" / "__pycache__").exists()
    assert (copy / ".venv").is_symlink() and not (copy / "gpuadvisor-runs" / "a").exists()
    place.remove()


def test_a_working_directory_too_large_to_copy_is_said_before_any_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scratch, "FILE_LIMIT", 5)
    project = tmp_path / "project"
    project.mkdir()
    for i in range(8):
        (project / f"f{i}.txt").write_text("x")
    with pytest.raises(UsageError, match="--allow-writes"):
        prepare(project, allow_writes=False, temp_root=str(tmp_path))
    place = prepare(project, allow_writes=True)
    assert place.cwd == project and place.guard() is None and "replaces your files" in place.text
