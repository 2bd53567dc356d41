"""Is a folder of traces one job? Which rank each file says it is (its metadata, else `rankN` in its
name), and the check that a folder's files are the distinct ranks of one job (`check_one_job`).

Read by the loader (`trace/load.py` refuses a folder early, from the files' heads) and re-exported by
`gpuadvisor.multirank`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuadvisor.errors import InputError
from gpuadvisor.trace.kind import Vendor, kind_of

if TYPE_CHECKING:
    from gpuadvisor.trace.model import TraceModel

__all__ = [
    "RankClaim",
    "check_one_job",
    "claim_of",
    "job_problems",
    "not_one_job_error",
    "rank_in_name",
    "rank_problems",
]

_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.I)


def rank_in_name(name: str) -> int | None:
    """N of `rankN` / `rank-N` / `rank_N` in a file name, else None."""
    m = _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None


# ---- is a folder one job? ------------------------------------------------------------------------


@dataclass(frozen=True)
class RankClaim:
    """Which rank a trace file says it is (from its metadata, else its name), for the one-job check."""

    name: str  # file name
    rank: int | None  # None: the file says no rank (no distributedInfo.rank, no rankN in its name)
    world_size: int | None = None


def claim_of(trace: TraceModel) -> RankClaim:
    info = trace.meta.distributed_info or {}
    rank = info.get("rank")
    size = info.get("world_size")
    known = (isinstance(rank, int) and not isinstance(rank, bool)) or rank_in_name(trace.path.name) is not None
    return RankClaim(
        name=trace.path.name,
        rank=trace.rank if known else None,
        world_size=size if isinstance(size, int) and not isinstance(size, bool) else None,
    )


def rank_problems(claims: Sequence[RankClaim]) -> list[str]:
    """Why these files' rank claims are not distinct ranks of one job: a file that says no rank, two
    that claim the same rank, world sizes that differ or a rank not below the world size."""
    if len(claims) <= 1:
        return []
    problems: list[str] = []
    unknown = [c.name for c in claims if c.rank is None]
    if unknown:
        problems.append(
            f"{_names(unknown)} say{'s' if len(unknown) == 1 else ''} no rank (no distributedInfo.rank, "
            "no rankN in the file name)"
        )
    by_rank: dict[int, list[str]] = {}
    for c in claims:
        if c.rank is not None:
            by_rank.setdefault(c.rank, []).append(c.name)
    for rank, names in sorted(by_rank.items()):
        if len(names) > 1:
            problems.append(f"{_names(names)} all claim rank {rank}")
    sizes = sorted({c.world_size for c in claims if c.world_size is not None})
    if len(sizes) > 1:
        problems.append(f"world sizes differ ({', '.join(map(str, sizes))})")
    elif sizes:
        beyond = sorted(c.rank for c in claims if c.rank is not None and c.rank >= sizes[0])
        if beyond:
            problems.append(f"rank {beyond[0]} is not below the world size {sizes[0]}")
    return problems


def job_problems(traces: Sequence[TraceModel]) -> list[str]:
    """Why these traces are not the distinct ranks of one job (empty when they are).

    One job: every file says which rank it is (distributedInfo.rank, else rankN in its name), no two
    claim the same rank, world sizes agree and every rank is below it (`rank_problems`), and every file
    has the same schema version and accelerator vendor (a rank that recorded no GPU activity is allowed)."""
    if len(traces) <= 1:
        return []
    problems = rank_problems([claim_of(t) for t in traces])
    kinds = [kind_of(t) for t in traces]
    schemas = sorted({str(k.schema_version) for k in kinds})
    if len(schemas) > 1:
        problems.append(f"schema versions differ ({', '.join(schemas)})")
    vendors = sorted({k.vendor.value for k in kinds if k.vendor is not Vendor.NONE})
    if len(vendors) > 1:
        problems.append(f"accelerators differ ({', '.join(vendors)})")
    return problems


def _names(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(sorted(names)[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def not_one_job_error(where: object, count: int, problems: Sequence[str]) -> InputError:
    return InputError(
        f"{where}: the {count} traces in it are not the distinct ranks of one job: "
        + "; ".join(problems)
        + ". Analyze each file on its own (gpuadvisor analyze FILE), or put each job's rank files in a "
        "folder of their own."
    )


def check_one_job(traces: Sequence[TraceModel], where: object) -> None:
    """Raise InputError (exit 2) when `traces` (the files of folder `where`) are not one job's ranks."""
    problems = job_problems(traces)
    if problems:
        raise not_one_job_error(where, len(traces), problems)
