"""Where verify's trials run: a scratch copy of the recorded working directory, so that nothing the
script writes (checkpoints, logs, outputs) replaces what the user keeps (issue 39: a script saving
ckpt.pt every 5 steps left, after `verify --only larger_batch`, a 5-step model trained with a 4x batch
in place of the real run's checkpoint).

`prepare(cwd, ...)` copies the working directory into a temporary folder before the first trial:
folders are made, files up to LINK_FROM_BYTES are copied, larger files (datasets, checkpoints), the
folders of tools (`.git`, `.venv` and any virtual environment, `node_modules`, caches: LINKED_FOLDERS)
become links to the originals, symbolic links are copied as links; gpuadvisor's own run directories
and `__pycache__` are left out. The trials then run there, under a write guard (`gpuadvisor.verify.guard`, installed in
each trial process) that lets a write through only inside the copy, the temporary folder and the
cache folders, and turns a write to a linked original into a write to a fresh file of the copy.
A working directory too large to copy (more than COPY_LIMIT_BYTES of small files or FILE_LIMIT
entries, or more than the free space) is said before the first trial: verify stops (exit 2) unless
`--allow-writes`, which runs the trials in the working directory itself, unguarded.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuadvisor import rundir
from gpuadvisor.errors import UsageError
from gpuadvisor.words import plural

__all__ = ["COPY_LIMIT_BYTES", "FILE_LIMIT", "LINK_FROM_BYTES", "Workplace", "cache_roots", "prepare"]

LINK_FROM_BYTES = 64 << 20  # larger files are linked, not copied (a write to one breaks the link)
COPY_LIMIT_BYTES = 1 << 30  # of the files copied
FILE_LIMIT = 100_000  # entries of the working directory


@dataclass(frozen=True)
class Workplace:
    """Where the trials run (`cwd`), the scratch copy to remove afterwards (None with --allow-writes),
    the folders the write guard lets writes into (None: no guard), and what verify says about it
    before the first trial."""

    cwd: Path
    scratch: Path | None
    write_roots: tuple[str, ...] | None
    text: str
    linked: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()  # the original working directory: never written, whatever the roots

    def guard(self) -> dict[str, list[str]] | None:
        """The write guard's configuration for the trial process (None: no guard)."""
        if self.write_roots is None:
            return None
        return {"copy": [str(self.cwd), os.path.realpath(self.cwd)], "roots": list(self.write_roots),
                "protected": list(self.protected)}  # fmt: skip

    def translate(self, recorded_cwd: Path, path: str) -> str:
        """A recorded absolute path under the working directory, as the same path of the copy."""
        p = Path(path)
        if self.scratch is None or not p.is_absolute():
            return path
        try:
            return str(self.cwd / p.relative_to(recorded_cwd))
        except ValueError:
            return path

    def stamp(self, document: dict[str, Any], results: Sequence[Mapping[str, Any]]) -> None:
        """verify.json's `workplace` (where the trials ran), and a note naming the writes the guard
        refused in the trials' `results`."""
        refused = sorted({str(p) for r in results for p in r.get("writes_refused") or []})
        document["workplace"] = {
            "scratch_copy": self.scratch is not None,
            "text": self.text,
            "linked": list(self.linked),
            "writes_refused": refused,
        }
        if refused:
            document.setdefault("notes", []).append(
                f"the trials' writes outside their scratch copy were refused: {', '.join(refused[:5])}"
                + (" ..." if len(refused) > 5 else "")
                + " (--allow-writes lets them through)"
            )

    def remove(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def cache_roots(env: os._Environ[str] | dict[str, str] | None = None) -> list[str]:
    """Folders of regenerable caches a trial may write (compilers, downloads): never what a user keeps."""
    env = env if env is not None else os.environ
    home = Path.home()
    named = [env.get(k) for k in ("XDG_CACHE_HOME", "TORCH_HOME", "HF_HOME", "TRITON_CACHE_DIR",
                                  "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "MPLCONFIGDIR")]  # fmt: skip
    roots = [home / ".cache", home / ".triton", home / ".nv", home / ".config" / "matplotlib"]
    return [str(p) for p in (*roots, *(Path(n) for n in named if n))]


def _is_gpuadvisor_run(path: Path) -> bool:
    return rundir.is_run_dir(path) and ((path / rundir.TRACE_DIR).is_dir() or (path / rundir.LOG).is_file())


# folders that hold tools, not what a script writes: linked into the copy as a whole, never copied
LINKED_FOLDERS = frozenset({".git", ".hg", ".svn", ".venv", "venv", "node_modules", ".tox", ".nox",
                            ".mypy_cache", ".pytest_cache", ".ruff_cache"})  # fmt: skip


def _linked_folder(path: Path, name: str) -> bool:
    return name in LINKED_FOLDERS or (path / "pyvenv.cfg").is_file()


def _walk(root: Path, skip: Sequence[Path]) -> Iterator[tuple[Path, os.stat_result]]:
    """Every entry under `root` (not following links), without the folders of `skip`, gpuadvisor's
    run directories and __pycache__, and without descending into LINKED_FOLDERS and virtual
    environments (yielded, not walked)."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            path = Path(entry.path)
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if entry.name == "__pycache__" or path in skip or _is_gpuadvisor_run(path):
                    continue
                if not _linked_folder(path, entry.name):
                    stack.append(path)
            yield path, st


def _too_large(cwd: Path, why: str) -> UsageError:
    return UsageError(
        f"verify runs each trial in a scratch copy of the working directory, so that what the script "
        f"writes (checkpoints, logs) never replaces your files; {cwd} {why}. Run verify from a smaller "
        f"working directory, or pass --allow-writes to run the trials in {cwd} itself (what the script "
        f"writes there replaces your files)"
    )


def prepare(
    cwd: Path, *, allow_writes: bool, skip: Sequence[Path] = (), temp_root: str | None = None
) -> Workplace:
    """The trials' working place (see the module docstring). UsageError when the working directory
    cannot be copied and `allow_writes` is off: said before any trial runs."""
    cwd = Path(cwd)
    if allow_writes:
        return Workplace(
            cwd=cwd,
            scratch=None,
            write_roots=None,
            text=f"--allow-writes: the trials run in {cwd} itself; what the script writes there "
            "(checkpoints, logs) replaces your files",
        )
    real_skip = [Path(os.path.realpath(p)) for p in skip]
    entries: list[tuple[Path, os.stat_result]] = []
    copied_bytes = 0
    for path, st in _walk(cwd, [p for p in (*skip, *real_skip)]):
        entries.append((path, st))
        if len(entries) > FILE_LIMIT:
            raise _too_large(cwd, f"holds more than {FILE_LIMIT:,} files and folders")
        if stat.S_ISREG(st.st_mode) and st.st_size <= LINK_FROM_BYTES:
            copied_bytes += st.st_size
    if copied_bytes > COPY_LIMIT_BYTES:
        raise _too_large(cwd, f"holds {copied_bytes / 2**30:.1f} GiB of files up to {LINK_FROM_BYTES >> 20} MiB "
                         f"(verify copies at most {COPY_LIMIT_BYTES >> 30} GiB)")  # fmt: skip
    base = Path(tempfile.mkdtemp(prefix="gpuadvisor-verify-wd-", dir=temp_root))
    free = shutil.disk_usage(base).free
    if copied_bytes * 2 > free:
        shutil.rmtree(base, ignore_errors=True)
        raise _too_large(
            cwd, f"needs {copied_bytes >> 20} MiB copied, and {base.parent} has {free >> 20} MiB free"
        )
    copy = base / (cwd.name or "cwd")
    linked: list[str] = []
    try:
        copy.mkdir()
        for path, st in entries:
            rel = path.relative_to(cwd)
            dest = copy / rel
            if stat.S_ISDIR(st.st_mode) and _linked_folder(path, path.name):
                os.symlink(path, dest)
                linked.append(f"{rel}/")
            elif stat.S_ISDIR(st.st_mode):
                dest.mkdir(exist_ok=True)
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(path), dest)
            elif stat.S_ISREG(st.st_mode):
                if st.st_size > LINK_FROM_BYTES:
                    os.symlink(path, dest)
                    linked.append(str(rel))
                else:
                    shutil.copy2(path, dest, follow_symlinks=False)
    except OSError as err:
        shutil.rmtree(base, ignore_errors=True)
        raise _too_large(cwd, f"could not be copied ({err.strerror or err})") from None
    files = sum(1 for _, st in entries if not stat.S_ISDIR(st.st_mode))
    text = (
        f"the trials run in a scratch copy of {cwd} ({plural(files, 'file')}, {copied_bytes / 2**20:.1f} MiB "
        f"copied"
        + (f"; {plural(len(linked), 'large file')} linked, e.g. {linked[0]}" if linked else "")
        + "): what the script writes stays there; writes outside it, the temporary folder and the cache "
        "folders are refused (pass --allow-writes to let them through)"
    )
    roots = (tempfile.gettempdir(), os.path.realpath(tempfile.gettempdir()), "/dev", "/proc", *cache_roots())
    return Workplace(
        cwd=copy,
        scratch=base,
        write_roots=tuple(dict.fromkeys(roots)),
        text=text,
        linked=tuple(linked),
        protected=(str(cwd), os.path.realpath(cwd)),
    )
