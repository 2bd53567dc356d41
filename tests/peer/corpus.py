"""The peer-trace corpus (`../shared/peer-traces`, see its README.md) and what each file is.

`EXPECT` says, per file (path relative to the corpus), what a correct analysis must label it: the
accelerator vendor, training or inference, the schema, CPU-only, steps, torch.compile, the world size;
or, for files that are not Kineto trace, the words the exit-2 message must use. Every file of the
corpus must be listed here (a test checks it), so a file added to the corpus needs a line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "GPUADVISOR_PEER_TRACES"


def peer_candidates(root: Path | None = None) -> list[Path]:
    """Where the corpus may be, in order: $GPUADVISOR_PEER_TRACES; `shared/peer-traces` next to the
    checkout (CI's layout: `<dir>/repo` and `<dir>/shared`); for a git worktree, next to the main
    checkout it belongs to (its `.git` file names `<main>/.git/worktrees/<name>`)."""
    root = root or Path(__file__).resolve().parents[2]
    out: list[Path] = []
    if os.environ.get(ENV_VAR):
        out.append(Path(os.environ[ENV_VAR]).expanduser())
    out.append(root.parent / "shared" / "peer-traces")
    dotgit = root / ".git"
    if dotgit.is_file():
        text = dotgit.read_text(encoding="utf-8", errors="replace").strip()
        if text.startswith("gitdir:"):
            gitdir = Path(text[len("gitdir:") :].strip())
            if gitdir.parent.name == "worktrees":
                out.append(gitdir.parent.parent.parent.parent / "shared" / "peer-traces")
    return list(dict.fromkeys(out))


def find_peer(root: Path | None = None) -> tuple[Path, str]:
    """(the corpus folder, the skip reason when it is absent: every place looked at)."""
    candidates = peer_candidates(root)
    for path in candidates:
        if path.is_dir():
            return path, ""
    looked = ", ".join(str(p) for p in candidates)
    return candidates[0], (
        f"the peer-trace corpus is not on this machine (looked in: {looked}; "
        f"set {ENV_VAR}=DIR to point at it)"
    )


PEER, SKIP_REASON = find_peer()

# Files bigger than this on disk, and their folders, are marked `slow` (a few seconds each on 2 cores).
SLOW_BYTES = 500_000
# A few traces above that size stay in the fast tier: the 2021 schema and the 8-rank job must always run.
FAST_ANYWAY = frozenset(
    {
        "kineto/resnet50_num_workers_4/worker0.pt.trace.json.gz",
    }
)


@dataclass(frozen=True)
class Expect:
    """What one file is. None: not checked."""

    not_trace: str | None = None  # words of the exit-2 message ("execution trace")
    vendor: str | None = None  # nvidia / amd / mtia / other / none
    workload: str | None = None  # training / inference / unknown
    schema: str | None = None  # current / old / unversioned / unknown
    cpu_only: bool | None = None
    min_steps: int | None = None  # steps segmented from markers (not the whole-trace fallback)
    torch_compile: bool | None = None
    world_size: int | None = None


_KINETO_2021 = Expect(vendor="nvidia", workload="training", schema="old", min_steps=5)
_DLRM = Expect(vendor="nvidia", workload="training", schema="current", world_size=8, min_steps=1)
_CRITICAL = Expect(vendor="nvidia", workload="inference", cpu_only=False)

EXPECT: dict[str, Expect] = {
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz": Expect(
        vendor="amd", workload="training", schema="current", min_steps=2
    ),
    "hta/call_stack/backward_thread.json": Expect(workload="training", schema="unversioned"),
    "hta/cpu_only/old_05cd72f.rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": Expect(
        vendor="none", cpu_only=True, workload="training", world_size=300, min_steps=5
    ),
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": Expect(
        vendor="none", cpu_only=True, workload="unknown", world_size=300
    ),
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": _CRITICAL,
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz": _CRITICAL,
    "hta/critical_path/cuda_event_sync/old_a4a6c2d.event_sync_trace.json.gz": _CRITICAL,
    "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz": _CRITICAL,
    "hta/critical_path/end_to_end/simple_add/input/trace.json.gz": _CRITICAL,
    "hta/critical_path/end_to_end/simple_add/output/overlaid_critical_path_trace.json.gz": _CRITICAL,
    "hta/critical_path/end_to_end/simple_add/output/old_27b06fc.overlaid_critical_path_trace.json.gz": _CRITICAL,
    # CUPTI range profiling: runtime calls, no kernel activity
    "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz": Expect(
        vendor="nvidia", cpu_only=True, workload="inference"
    ),
    "hta/df_index_resolver/df_index_resolver.json.gz": Expect(
        vendor="nvidia", workload="training", torch_compile=True, world_size=2, min_steps=4
    ),
    "hta/distributed_info_unavailable/distributed_info_not_found.json.gz": Expect(
        cpu_only=True, workload="training"
    ),
    "hta/execution_trace/benchmark_simple_add_et.json.gz": Expect(not_trace="PyTorch execution trace"),
    "hta/execution_trace/benchmark_simple_add_trace.json.gz": _CRITICAL,
    "hta/large_integer_trace/old_409ef99.rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz": Expect(
        vendor="nvidia"
    ),
    "hta/memory_analysis/memory_timeline.raw.gz": Expect(not_trace="PyTorch memory timeline"),
    "hta/mixed_files/rank_non_gpu.json.gz": Expect(vendor="none", cpu_only=True, workload="training"),
    "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz": Expect(
        vendor="mtia", workload="inference", cpu_only=False
    ),
    "hta/mtia_trace_single_rank/mtia_rank_0.json.gz": Expect(
        vendor="mtia", workload="training", cpu_only=False, min_steps=1
    ),
    "hta/nccl_parser_config/nccl_data.json.gz": Expect(
        vendor="nvidia", workload="training", world_size=2, min_steps=3
    ),
    "hta/negative_queue_length_values_check/rank0.json.gz": Expect(
        vendor="nvidia", workload="training", world_size=16, torch_compile=True, min_steps=5
    ),
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": Expect(
        vendor="nvidia", workload="training", min_steps=5
    ),
    "hta/rank_unavailable/old_9246864.rank_not_found.json.gz": Expect(cpu_only=True, workload="training"),
    "hta/rank_unavailable/rank_not_found.json.gz": Expect(cpu_only=True, workload="training"),
    "hta/timeline_analysis/sampled_rank-0.json.gz": Expect(
        vendor="nvidia", workload="training", world_size=128, min_steps=2
    ),
    "hta/trace_compare/base/base.json.gz": Expect(vendor="nvidia", schema="unversioned", min_steps=2),
    "hta/trace_compare/test/test.json.gz": Expect(vendor="nvidia", schema="unversioned", min_steps=2),
    "hta/trace_diff/control/control.json.gz": Expect(
        vendor="nvidia", workload="training", world_size=8, min_steps=6
    ),
    "hta/trace_diff/test/test.json.gz": Expect(
        vendor="nvidia", workload="training", world_size=2, torch_compile=True, min_steps=6
    ),
    "hta/trace_file_list/inference_rank_1.json.gz": Expect(
        vendor="nvidia", workload="inference", schema="old"
    ),
    "hta/trace_filter/sampled_rank-0.json.gz": Expect(vendor="nvidia", workload="training", world_size=128),
    "hta/trace_filter/sampled_rank-1.json.gz": Expect(vendor="nvidia", workload="training", world_size=128),
    "hta/triton_example/triton_example.json.gz": Expect(
        vendor="nvidia", workload="inference", torch_compile=True, min_steps=1
    ),
    "hta/triton_example/old_0935c73.triton_example.json.gz": Expect(
        vendor="nvidia", workload="inference", torch_compile=True
    ),
    "hta/triton_example/old_36347a1.triton_example.json.gz": Expect(
        vendor="nvidia", workload="inference", torch_compile=True
    ),
    "hta/with_gpu_user_annotation/old_b2a719b.step_based_trace_2543932.json.gz": Expect(
        vendor="nvidia", workload="training", min_steps=4
    ),
    "kineto/resnet50_autograd_api_num_workers_0/worker0.pt.trace.json.gz": _KINETO_2021,
    "kineto/resnet50_autograd_api_num_workers_4/worker0.pt.trace.json.gz": _KINETO_2021,
    "kineto/resnet50_num_workers_0/d3fb407.worker0.pt.trace.json.gz": _KINETO_2021,
    "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz": _KINETO_2021,
    "kineto/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz": _KINETO_2021,
    "kineto/resnet50_num_workers_0/worker0.pt.trace.json.gz": _KINETO_2021,
    "kineto/resnet50_num_workers_4/7bd25bd.worker0.pt.trace.json.gz": _KINETO_2021,
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz": _KINETO_2021,
    "kineto/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz": _KINETO_2021,
    "kineto/resnet50_num_workers_4/worker0.pt.trace.json.gz": _KINETO_2021,
    "param/dlrm_kineto_8rank/worker0_step_12.1694128201545.pt.trace.json": _DLRM,
    "param/dlrm_kineto_8rank/worker1_step_12.1694128201556.pt.trace.json": _DLRM,
    "param/dlrm_kineto_8rank/worker2_step_12.1694128201554.pt.trace.json": _DLRM,
    "param/dlrm_kineto_8rank/worker3_step_12.1694128201557.pt.trace.json": _DLRM,
    "param/dlrm_kineto_8rank/worker4_step_12.1694128201547.pt.trace.json": _DLRM,
    "param/dlrm_kineto_8rank/worker5_step_12.1694128201549.pt.trace.json": _DLRM,
    "param/dlrm_kineto_8rank/worker6_step_12.1694128201553.pt.trace.json": _DLRM,
    "param/dlrm_kineto_8rank/worker7_step_12.1694128201553.pt.trace.json": _DLRM,
    "param/linear_kineto.json.gz": Expect(vendor="nvidia", workload="training", min_steps=30),
    "param/non_kineto/linear_et.json.gz": Expect(not_trace="PyTorch execution trace"),
    "param/resnet_kineto.json.gz": Expect(vendor="nvidia", workload="training", min_steps=20),
}

# Folders: one job (the ranks it must show) or refused (words of the exit-2 message).
FOLDERS_ONE_JOB: dict[str, tuple[int, ...]] = {
    "param/dlrm_kineto_8rank": tuple(range(8)),
    "hta/trace_filter": (0, 1),
}
FOLDERS_REFUSED: dict[str, str] = {
    "hta/triton_example": "say no rank",
    "hta/rank_unavailable": "say no rank",
    "hta/cpu_only": "all claim rank 34",
    "hta/critical_path/cuda_event_sync": "all claim rank 0",
    "hta/critical_path/end_to_end/simple_add/output": "all claim rank 0",
    "hta/execution_trace": "PyTorch execution trace",
    "hta/memory_analysis": "no .json/.json.gz traces",
    "kineto/resnet50_num_workers_0": "say no rank",
    "kineto/resnet50_num_workers_4": "say no rank",
}
# Refused from the files' heads and tails (`peek_rank_claim`) without parsing them: fast even for
# 4 x 30 MB; a folder whose refusal needs full loads would be listed here.
SLOW_FOLDERS: frozenset[str] = frozenset()


def corpus_files() -> list[str]:
    """Every file of the corpus except README.md and the LICENSE files, relative, sorted."""
    if not PEER.is_dir():
        return []
    return sorted(
        str(p.relative_to(PEER))
        for p in PEER.rglob("*")
        if p.is_file() and p.name not in ("README.md", "LICENSE")
    )


def is_slow(rel: str) -> bool:
    if rel in FAST_ANYWAY:
        return False
    path = PEER / rel
    return path.is_file() and path.stat().st_size > SLOW_BYTES
