"""Merging the per-rank hand-over files of a distributed capture into one manifest.

Each rank of a torchrun/DDP job writes `RUN/.child_state.rank{N}.json` (see session.py). The launcher
parent (`gpuadvisor profile --nproc-per-node`) or, under an existing launcher, every rank as it exits
(under a file lock: the last one to exit writes the complete manifest) calls `merge_ranks`.
"""

from __future__ import annotations

import contextlib
import signal
import statistics
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from gpuadvisor import rundir
from gpuadvisor.capture._io import read_json
from gpuadvisor.capture.session import rank_file_name
from gpuadvisor.manifest import (
    ChildState,
    Degraded,
    DegradedFlag,
    Distributed,
    ExitReason,
    Manifest,
    RankEntry,
    host_step_durations,
    merge_flags,
)
from gpuadvisor.words import after_steps

LOCK_FILE = ".manifest.lock"
# exit reasons of a rank that failed by itself (the others were stopped because of it)
_OWN_FAILURES = (ExitReason.EXCEPTION, ExitReason.SYS_EXIT, ExitReason.KILLED)


def read_rank_states(run_dir: Path, world_size: int | None) -> dict[int, ChildState]:
    """Rank -> its hand-over state, for every readable `.child_state.rank*.json` below `world_size`."""
    states: dict[int, ChildState] = {}
    for path in sorted(run_dir.glob(".child_state.rank*.json")):
        digits = path.name[len(".child_state.rank") : -len(".json")]
        if not digits.isdigit():
            continue
        rank = int(digits)
        if world_size is not None and rank >= world_size:
            continue  # left over from an earlier, larger run
        data = read_json(path)
        if isinstance(data, dict):
            states[rank] = ChildState.from_json(data)
    return states


def rank_entry(
    run_dir: Path, rank: int, state: ChildState | None, unfinished_reason: ExitReason = ExitReason.KILLED
) -> RankEntry:
    """The manifest's `ranks[]` item of one rank (state None: the rank never started the capture).

    A rank that started but wrote no end is `unfinished_reason`: `killed` once the launcher has
    ended, `running` for a merge made by a rank while others may still run."""
    trace = f"{rundir.TRACE_DIR}/rank{rank}.json.gz"
    env_name = rank_file_name(rundir.ENVIRONMENT, rank)
    cs_name = rank_file_name(rundir.CALLSITES, rank)
    files = RankEntry(
        rank=rank,
        trace=trace if (run_dir / trace).is_file() else None,
        environment=env_name if (run_dir / env_name).is_file() else None,
        callsites=cs_name if (run_dir / cs_name).is_file() else None,
    )
    if state is None:
        return files
    unprofiled, profiled = _step_medians(state)
    return replace(
        files,
        local_rank=state.local_rank,
        node_rank=state.node_rank,
        host=state.host,
        pid=state.pid,
        exit_status=state.exit_status,
        # started, never reached the end of its own run
        exit_reason=state.exit_reason if state.exit_reason is not None else unfinished_reason,
        signal=state.signal,
        failed_at_step=state.failed_at_step,
        failed_at_unix_s=state.failed_at_unix_s,
        ended_unix_s=state.ended_unix_s,
        steps_seen=state.steps_seen,
        step_detection=state.step_detection,
        capture_state=state.capture.state,
        first_recorded_step=state.capture.first_recorded_step,
        last_recorded_step=state.capture.last_recorded_step,
        degraded=tuple(state.degraded_strings),
        unprofiled_step_ms=unprofiled,
        profiled_step_ms=profiled,
    )


def _step_medians(state: ChildState) -> tuple[float | None, float | None]:
    """The rank's own unprofiled and profiled step medians (ms), from its step boundary times."""
    outside, inside = host_step_durations(state.capture)
    return (
        round(statistics.median(outside), 4) if outside else None,
        round(statistics.median(inside), 4) if inside else None,
    )


def failing_rank(entries: list[RankEntry]) -> RankEntry | None:
    """The rank that failed first by itself: raised, exited non-zero or was killed outright.

    Ranks stopped by the launcher's SIGTERM are victims, not causes. Among several failures (a peer's
    collective raises once the first rank is gone) the earliest failure time wins.
    """
    failed = [
        e
        for e in entries
        if e.exit_reason in _OWN_FAILURES and (e.exit_reason is ExitReason.KILLED or e.exit_status not in (0, None))
    ]
    if not failed:
        return None

    def when(e: RankEntry) -> tuple[int, float, int]:
        t = e.failed_at_unix_s if e.failed_at_unix_s is not None else e.ended_unix_s
        # killed ranks have no time: after the ones that say when they failed
        return (0 if t is not None else 1, float(t or 0.0), e.rank)

    return min(failed, key=when)


def merge_ranks(
    run_dir: Path,
    manifest: Manifest,
    *,
    world_size: int | None,
    launcher_status: int | None,
    distributed: Distributed,
    only_present: bool = False,
    unfinished_reason: ExitReason = ExitReason.KILLED,
) -> tuple[Manifest, int]:
    """`manifest` with the distributed keys filled from the rank states, and the exit status.

    Top-level keys keep their single-rank meaning for rank 0 (steps, capture window, step detection);
    `traces` lists every rank's trace; `degraded`/`messages` are the union (a message only some ranks
    have is prefixed "rank N: "); `exit_status` is the failing rank's own status, else the launcher's
    (`launcher_status`, None under an existing launcher: then the worst rank's). `only_present`: list
    only the ranks that left a state here (multi-node: other nodes write their own run directories).
    """
    states = read_rank_states(run_dir, world_size)
    if world_size is None:
        sizes = [s.world_size for s in states.values()]
        world_size = max([*sizes, *(r + 1 for r in states)], default=0)
    listed = sorted(states) if only_present else range(world_size)
    entries = [rank_entry(run_dir, r, states.get(r), unfinished_reason) for r in listed]
    first = failing_rank(entries)
    rank0 = states.get(0)

    flags = list(manifest.degraded)
    unknown = list(manifest.unknown_degraded)
    messages: list[str] = list(manifest.messages)
    all_msgs = [list(s.messages) for s in states.values()]
    common = set(all_msgs[0]).intersection(*all_msgs[1:]) if all_msgs else set()
    for rank in sorted(states):
        st = states[rank]
        flags = list(merge_flags(flags, st.degraded))
        unknown += [u for u in st.unknown_degraded if u not in unknown]
        for msg in st.messages:
            text = msg if msg in common else f"rank {rank}: {msg}"
            if text not in messages:
                messages.append(text)
    killed = DegradedFlag(Degraded.KILLED)
    for e in entries:
        if e.exit_reason in (ExitReason.KILLED, ExitReason.NOT_STARTED) and killed not in flags:
            flags.append(killed)
        if e.exit_reason is ExitReason.KILLED:
            messages.append(f"rank {e.rank} was killed before it could finish; only what it had written is kept.")
        elif e.exit_reason is ExitReason.NOT_STARTED:
            messages.append(f"rank {e.rank} never started the capture (no state from it).")

    status: int | None
    if first is not None:
        status = first.exit_status if first.exit_status is not None else launcher_status
        where = f" {after_steps(first.failed_at_step)}" if first.failed_at_step is not None else ""
        messages.append(
            f"rank {first.rank} failed{where} ({first.exit_reason.value}); the launcher stopped the others."
        )
    elif launcher_status is not None:
        status = launcher_status
    else:
        statuses = [e.exit_status for e in entries if e.exit_status is not None]
        status = max(statuses, default=0)
    if status is None:
        status = 1

    backend = next((s.distributed_backend for s in states.values() if s.distributed_backend), None)
    sig = first.signal if first is not None else (rank0.signal if rank0 is not None else None)
    if sig is None and status > 128 and launcher_status == status:
        sig = status - 128 if status - 128 in signal.Signals._value2member_map_ else None
    if rank0 is not None:
        manifest = manifest.with_child(rank0)
    manifest = replace(
        manifest,
        exit_status=status,
        exit_reason=(
            first.exit_reason
            if first is not None
            else (rank0.exit_reason if rank0 is not None and rank0.exit_reason is not None else ExitReason.NOT_STARTED)
        ),
        signal=sig,
        failed_at_step=first.failed_at_step if first is not None else None,
        traces=tuple(e.trace for e in entries if e.trace is not None),
        degraded=tuple(flags),
        unknown_degraded=tuple(unknown),
        messages=tuple(messages),
        ranks=tuple(entries),
        distributed=replace(
            distributed,
            world_size=world_size,
            backend=backend,
            failed_rank=first.rank if first is not None else None,
            launcher_exit_status=launcher_status,
        ),
    )
    return manifest, int(status)


@contextlib.contextmanager
def manifest_lock(run_dir: Path) -> Iterator[None]:
    """An exclusive lock on RUN/.manifest.lock (ranks of one node merging the manifest one at a time)."""
    # lazy: fcntl is POSIX-only, and `import gpuadvisor.api` loads this module on any OS
    import fcntl

    with open(run_dir / LOCK_FILE, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
