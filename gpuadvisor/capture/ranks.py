"""Merging the per-rank hand-over files of a distributed capture into one manifest.

Each rank of a torchrun/DDP job writes `RUN/.child_state.rank{N}.json` (see session.py). The launcher
parent (`gpuadvisor profile --nproc-per-node`) or, under an existing launcher, every rank as it exits
(under a file lock: the last one to exit writes the complete manifest) calls `merge_ranks`.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuadvisor import rundir
from gpuadvisor.capture._io import read_json
from gpuadvisor.capture.session import rank_file_name

LOCK_FILE = ".manifest.lock"
# exit reasons of a rank that failed by itself (the others were stopped because of it)
_OWN_FAILURES = ("exception", "sys_exit", "killed")


def read_rank_states(run_dir: Path, world_size: int | None) -> dict[int, dict[str, Any]]:
    """Rank -> its hand-over dict, for every readable `.child_state.rank*.json` below `world_size`."""
    states: dict[int, dict[str, Any]] = {}
    for path in sorted(run_dir.glob(".child_state.rank*.json")):
        digits = path.name[len(".child_state.rank") : -len(".json")]
        if not digits.isdigit():
            continue
        rank = int(digits)
        if world_size is not None and rank >= world_size:
            continue  # left over from an earlier, larger run
        data = read_json(path)
        if isinstance(data, dict):
            states[rank] = data
    return states


def rank_entry(
    run_dir: Path, rank: int, state: dict[str, Any] | None, unfinished_reason: str = "killed"
) -> dict[str, Any]:
    """The manifest's `ranks[]` item of one rank (state None: the rank never started the capture).

    A rank that started but wrote no end is `unfinished_reason`: `killed` once the launcher has
    ended, `running` for a merge made by a rank while others may still run."""
    st = state or {}
    capture = st.get("capture") if isinstance(st.get("capture"), dict) else {}
    assert isinstance(capture, dict)
    reason = st.get("exit_reason")
    if not st:
        reason = "not_started"
    elif reason is None:
        reason = unfinished_reason  # started, never reached the end of its own run
    trace = f"{rundir.TRACE_DIR}/rank{rank}.json.gz"
    env_name = rank_file_name(rundir.ENVIRONMENT, rank)
    cs_name = rank_file_name(rundir.CALLSITES, rank)
    return {
        "rank": rank,
        "local_rank": st.get("local_rank"),
        "node_rank": st.get("node_rank"),
        "host": st.get("host"),
        "pid": st.get("pid"),
        "exit_status": st.get("exit_status"),
        "exit_reason": reason,
        "signal": st.get("signal"),
        "failed_at_step": st.get("failed_at_step"),
        "failed_at_unix_s": st.get("failed_at_unix_s"),
        "ended_unix_s": st.get("ended_unix_s"),
        "steps_seen": int(st.get("steps_seen") or 0),
        "step_detection": st.get("step_detection") or "none",
        "capture_state": capture.get("state", "not_reached"),
        "first_recorded_step": capture.get("first_recorded_step"),
        "last_recorded_step": capture.get("last_recorded_step"),
        "trace": trace if (run_dir / trace).is_file() else None,
        "environment": env_name if (run_dir / env_name).is_file() else None,
        "callsites": cs_name if (run_dir / cs_name).is_file() else None,
        "degraded": list(st.get("degraded") or []),
    }


def failing_rank(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank that failed first by itself: raised, exited non-zero or was killed outright.

    Ranks stopped by the launcher's SIGTERM are victims, not causes. Among several failures (a peer's
    collective raises once the first rank is gone) the earliest failure time wins.
    """
    failed = [
        e
        for e in entries
        if e["exit_reason"] in _OWN_FAILURES
        and (e["exit_reason"] == "killed" or e["exit_status"] not in (0, None))
    ]
    if not failed:
        return None

    def when(e: dict[str, Any]) -> tuple[int, float, int]:
        t = e.get("failed_at_unix_s") or e.get("ended_unix_s")
        # killed ranks have no time: after the ones that say when they failed
        return (0 if t is not None else 1, float(t or 0.0), int(e["rank"]))

    return min(failed, key=when)


def merge_ranks(
    run_dir: Path,
    manifest: dict[str, Any],
    *,
    world_size: int | None,
    launcher_status: int | None,
    distributed: dict[str, Any],
    only_present: bool = False,
    unfinished_reason: str = "killed",
) -> int:
    """Fill the distributed keys of `manifest` (in place) from the rank states; return the exit status.

    Top-level keys keep their single-rank meaning for rank 0 (steps, capture window, step detection);
    `traces` lists every rank's trace; `degraded`/`messages` are the union (a message only some ranks
    have is prefixed "rank N: "); `exit_status` is the failing rank's own status, else the launcher's
    (`launcher_status`, None under an existing launcher: then the worst rank's). `only_present`: list
    only the ranks that left a state here (multi-node: other nodes write their own run directories).
    """
    states = read_rank_states(run_dir, world_size)
    if world_size is None:
        sizes = [int(s.get("world_size") or 0) for s in states.values()]
        world_size = max([*sizes, *(r + 1 for r in states)], default=0)
    listed = sorted(states) if only_present else range(world_size)
    entries = [rank_entry(run_dir, r, states.get(r), unfinished_reason) for r in listed]
    first = failing_rank(entries)
    rank0 = states.get(0) or {}

    degraded: list[str] = list(manifest.get("degraded") or [])
    messages: list[str] = list(manifest.get("messages") or [])
    all_msgs = [list(s.get("messages") or []) for s in states.values()]
    common = set(all_msgs[0]).intersection(*all_msgs[1:]) if all_msgs else set()
    for rank in sorted(states):
        st = states[rank]
        for flag in st.get("degraded") or []:
            if flag not in degraded:
                degraded.append(flag)
        for msg in st.get("messages") or []:
            text = msg if msg in common else f"rank {rank}: {msg}"
            if text not in messages:
                messages.append(text)
    for e in entries:
        if e["exit_reason"] in ("killed", "not_started") and rundir.DEGRADED_KILLED not in degraded:
            degraded.append(rundir.DEGRADED_KILLED)
        if e["exit_reason"] == "killed":
            messages.append(
                f"rank {e['rank']} was killed before it could finish; only what it had written is kept."
            )
        elif e["exit_reason"] == "not_started":
            messages.append(f"rank {e['rank']} never started the capture (no state from it).")

    if first is not None:
        status = first["exit_status"] if first["exit_status"] is not None else launcher_status
        where = f" at step {first['failed_at_step']}" if first["failed_at_step"] is not None else ""
        messages.append(
            f"rank {first['rank']} failed{where} ({first['exit_reason']}); the launcher stopped the others."
        )
    elif launcher_status is not None:
        status = launcher_status
    else:
        statuses = [e["exit_status"] for e in entries if isinstance(e["exit_status"], int)]
        status = max(statuses, default=0)
    if status is None:
        status = 1

    backend = next(
        (s.get("distributed_backend") for s in states.values() if s.get("distributed_backend")), None
    )
    capture = dict(manifest.get("capture") or {})
    capture.update(rank0.get("capture") or {})
    sig = first["signal"] if first is not None else rank0.get("signal")
    if sig is None and status > 128 and launcher_status == status:
        sig = status - 128 if status - 128 in signal.Signals._value2member_map_ else None
    manifest.update(
        exit_status=status,
        exit_reason=(
            first["exit_reason"] if first is not None else rank0.get("exit_reason") or "not_started"
        ),
        signal=sig,
        failed_at_step=first["failed_at_step"] if first is not None else None,
        step_detection=rank0.get("step_detection") or "none",
        steps_seen=int(rank0.get("steps_seen") or 0),
        capture=capture,
        traces=[e["trace"] for e in entries if e["trace"] is not None],
        degraded=degraded,
        messages=messages,
        ranks=entries,
    )
    dist = dict(distributed)
    dist.update(
        world_size=world_size,
        backend=backend,
        failed_rank=first["rank"] if first is not None else None,
        launcher_exit_status=launcher_status,
    )
    manifest["distributed"] = dist
    if rank0.get("python"):
        manifest["python"] = rank0["python"]
    return int(status)


@contextlib.contextmanager
def manifest_lock(run_dir: Path) -> Iterator[None]:
    """An exclusive lock on RUN/.manifest.lock (ranks of one node merging the manifest one at a time)."""
    import fcntl

    with open(run_dir / LOCK_FILE, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
