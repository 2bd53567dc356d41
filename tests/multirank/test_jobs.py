"""Which folders are one job, DDP micro-batches, and one straggler verdict for GA1001 and GA1002, on
SYNTHETIC multi-rank traces (tests/multirank/scenarios.py, tests/synth.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

import gpuadvisor
from gpuadvisor import multirank as mr
from gpuadvisor.cli import cli
from gpuadvisor.errors import InputError
from gpuadvisor.trace.load import load_trace, load_traces
from tests.multirank.scenarios import RankLoad, ddp_run, write
from tests.synth import DDP_FORWARD, SyntheticTrace, add_collective, add_ddp_forward, rank_traces


def _two_steps(st: SyntheticTrace) -> SyntheticTrace:
    for i in range(3):
        st.add_step(i + 1, i * 1000.0, 900)
        st.add_cpu_op("aten::mm", i * 1000.0 + 10, 100)
    return st


# ---- one job or not -----------------------------------------------------------------------------------


def test_distinct_ranks_of_one_job_are_accepted_even_a_subset(tmp_path: Path) -> None:
    folder = tmp_path / "subset"
    folder.mkdir()
    for rank in (0, 5):
        _two_steps(SyntheticTrace(rank=rank, world_size=8)).write(folder / f"r{rank}.json")
    assert [m.rank for m in load_traces(folder)] == [0, 5]


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        ({"a.json": {"rank": 0}, "b.json": {"rank": 0}}, "a.json, b.json all claim rank 0"),
        ({"model_a.json": {}, "model_b.json": {}, "model_c.json": {}}, "say no rank"),
        (
            {"rank0.json": {"rank": 0, "world_size": 2}, "rank1.json": {"rank": 1, "world_size": 4}},
            "world sizes differ",
        ),
        (
            {"x.json": {"rank": 0, "world_size": 2}, "y.json": {"rank": 3, "world_size": 2}},
            "rank 3 is not below",
        ),
        (
            {"rank0.json": {"rank": 0, "schema": 1}, "rank1.json": {"rank": 1, "schema": 2}},
            "schema versions differ",
        ),
        (
            {"rank0.json": {"rank": 0}, "rank1.json": {"rank": 1, "hip": True}},
            "accelerators differ (amd, nvidia)",
        ),
    ],
)
def test_folders_that_are_not_one_job_exit_2(
    tmp_path: Path, layout: dict[str, dict[str, object]], says: str
) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name, spec in layout.items():
        rank = spec.get("rank")
        st = SyntheticTrace(
            rank=rank if isinstance(rank, int) else None, world_size=int(spec.get("world_size", 2))
        )  # type: ignore[call-overload]
        if "schema" in spec:
            st.top["schemaVersion"] = spec["schema"]
        for i in range(3):
            st.add_step(i + 1, i * 1000.0, 900)
            st.add_kernel(
                "k",
                i * 1000.0 + 100,
                50,
                launch_name="hipLaunchKernel" if spec.get("hip") else "cudaLaunchKernel",
            )
        st.write(folder / name)
    with pytest.raises(InputError, match="not the distinct ranks of one job") as info:
        load_traces(folder)
    assert says in str(info.value)
    res = CliRunner().invoke(cli, ["analyze", str(folder)])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output
    assert "Analyze each file on its own" in res.output


def test_a_rank_that_recorded_no_gpu_activity_stays_in_the_job(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    gpu = SyntheticTrace(rank=0, world_size=2)
    for i in range(3):
        gpu.add_step(i + 1, i * 1000.0, 900)
        gpu.add_kernel("k", i * 1000.0 + 100, 50)
    gpu.write(folder / "rank0.json")
    _two_steps(SyntheticTrace(rank=1, world_size=2, device_properties=None)).write(folder / "rank1.json")
    assert gpuadvisor.analyze(folder).source.ranks == (0, 1)


# ---- micro-batches --------------------------------------------------------------------------------------


def _nested_forward_run(tmp_path: Path) -> Path:
    """DLRM-like: one micro-batch per step whose DDP forward holds a nested DDP forward and an all-to-all
    (sharded embeddings), then a backward with gradient all-reduces."""
    traces = rank_traces(2)
    for st in traces:
        for n in range(1, 5):
            t = (n - 1) * 10_000.0
            st.add_step(n, t, 9_500)
            add_ddp_forward(st, t + 100, 4_000)
            st.add_annotation(DDP_FORWARD, t + 1_500, 400)  # nested module: not a micro-batch
            st._x("cpu_op", "c10d::alltoall_base_", t + 1_600, 80, {"External id": st.new_external_id()})
            for k in range(3):
                add_collective(st, t + 5_000 + k * 800, nelems=1_000_000, kernel_dur=300)
            st.add_optimizer_step(t + 8_000, 500)
            st.add_kernel("void at::native::multi_tensor_apply_kernel<Adam>", t + 8_100, 100)
    return write(tmp_path / "nested", traces)


def test_nested_ddp_forwards_are_one_micro_batch(tmp_path: Path) -> None:
    folder = _nested_forward_run(tmp_path)
    m = load_trace(folder / "rank0.json.gz")
    starts, ends = mr.micro_batches(m)
    assert len(starts) == 4 and all(e - s == pytest.approx(4_000) for s, e in zip(starts, ends, strict=True))
    r = mr.rank_summary(m)
    assert all(s.forwards == 1 and s.comm_rounds == 1 and s.optimizer_steps == 1 for s in r.steps)
    res = gpuadvisor.analyze(folder, select=["GA1004"])
    assert next(s for s in res.rules if s.rule == "GA1004").status == "ran"
    assert not res.findings


def test_collectives_inside_the_forward_do_not_make_a_round(tmp_path: Path) -> None:
    traces = rank_traces(2)
    for st in traces:
        for n in range(1, 4):
            t = (n - 1) * 20_000.0
            st.add_step(n, t, 19_000)
            for mb in range(3):  # three micro-batches under no_sync(): only the last all-reduces
                f = t + mb * 5_000
                add_ddp_forward(st, f, 2_000)
                st._x("cpu_op", "c10d::allgather_", f + 500, 50, {"External id": st.new_external_id()})
                if mb == 2:
                    add_collective(st, f + 3_000, nelems=1_000_000, kernel_dur=300)
            st.add_optimizer_step(t + 16_000, 500)
    m = load_trace(write(tmp_path / "fsdp", traces) / "rank0.json.gz")
    r = mr.rank_summary(m)
    assert [s.forwards for s in r.steps] == [3, 3, 3] and [s.comm_rounds for s in r.steps] == [1, 1, 1]


# ---- one straggler verdict ----------------------------------------------------------------------------


def _run(tmp_path: Path, loads: list[RankLoad], **kw: object) -> gpuadvisor.AnalysisResult:
    folder = write(tmp_path, ddp_run(loads, **kw))  # type: ignore[arg-type]
    return gpuadvisor.analyze(folder, select=["communication"])


def test_ga1001_and_ga1002_name_the_same_straggler(tmp_path: Path) -> None:
    res = _run(
        tmp_path,
        [RankLoad(), RankLoad(), RankLoad(data_wait_us=3000), RankLoad()],
        overlap=0.0,
        transfer_us=2000,
    )
    by_rule = res.by_rule()
    (g2,) = by_rule["GA1002"]
    (g1,) = by_rule["GA1001"]
    assert g2.evidence["straggler_rank"] == 2 == g1.evidence["straggler_rank"] == g1.evidence["rank"]
    assert g1.evidence["impact_basis"] == "straggler"
    # every number is the named rank's own
    assert g1.impact == pytest.approx(g1.evidence["ranks"]["2"]["exposed_fraction"])
    most = g1.evidence["most_exposed_rank"]
    assert (
        f"most exposed rank {most} ({g1.evidence['ranks'][str(most)]['exposed_fraction']:.0%})" in g1.message
    )
    assert "rank 2, the straggler (GA1002)" in g1.message


def test_a_late_rank_below_the_verdict_is_nobodys_straggler(tmp_path: Path) -> None:
    # rank 1 is last at every collective but only ~1% late: no verdict, so neither rule speaks of it
    res = _run(tmp_path, [RankLoad(), RankLoad(data_wait_us=200)], overlap=0.0, transfer_us=3000)
    cr = mr.cross_rank([*res.traces])
    assert cr.straggler is not None and cr.straggler.rank == 1
    assert mr.straggler_verdict(cr) is None
    by_rule = res.by_rule()
    assert "GA1002" not in by_rule
    (g1,) = by_rule["GA1001"]
    assert g1.evidence["straggler_rank"] is None and "straggler" not in g1.message
    assert g1.evidence["impact_basis"] == "median_rank"
    assert g1.impact == pytest.approx(g1.evidence["ranks"][str(g1.evidence["rank"])]["exposed_fraction"])


def test_verdict_takes_unprofiled_step_time_as_evidence(tmp_path: Path) -> None:
    # a straggler late by more than the other rank's compute: most of the step is the wait for it
    res = _run(tmp_path, [RankLoad(), RankLoad(data_wait_us=12000)])
    cr = mr.cross_rank([*res.traces])
    v = mr.straggler_verdict(cr)
    assert v is not None and v.rank == 1 and v.late_fraction >= mr.STRAGGLER_MIN_LATE_FRACTION
    late = v.straggler.late_us_per_step
    assert not v.profiler_induced and v.late_outside_us is None  # a raw trace: unchecked
    # outside the profiler the step was shorter by more than the lateness: the profiler can explain it
    induced = mr.straggler_verdict(cr, unprofiled_step_us=v.step_us - 1.5 * late)
    assert induced is not None and induced.profiler_induced
    kept = mr.straggler_verdict(cr, unprofiled_step_us=v.step_us - 0.2 * late)
    assert kept is not None and not kept.profiler_induced
    assert kept.unprofiled_step_us == pytest.approx(v.step_us - 0.2 * late)
    # the unprofiled step bounds the lateness outside the window: step - the other rank's compute - the
    # collective itself (the late rank's own collective time: it waits for no one)
    compute0 = cr.ranks[0].median("compute_us") or 0.0
    bare = cr.ranks[1].median("comm_us") or 0.0
    assert kept.late_outside_us == pytest.approx(min(late, v.step_us - 0.2 * late - compute0 - bare))
    # An unprofiled step that the other rank's compute mostly explains (30% left): a late rank whose
    # cause is its DataLoader wait (worker processes the profiler does not slow) is still a straggler,
    # bounded; the same lateness from host-side work, which the profiler inflates, is profiler-induced.
    tight_u = compute0 / (1 - 0.3)
    tight = mr.straggler_verdict(cr, unprofiled_step_us=tight_u)
    assert tight is not None and not tight.profiler_induced and cr.straggler is not None
    assert cr.straggler.cause == "data_wait" and tight.late_outside_us == pytest.approx(0.3 * tight_u - bare)
    host = dataclasses.replace(cr, straggler=dataclasses.replace(cr.straggler, cause="communication"))
    host_verdict = mr.straggler_verdict(host, unprofiled_step_us=tight_u)
    assert host_verdict is not None and host_verdict.profiler_induced
    stricter = mr.straggler_verdict(cr, min_late_fraction=0.9)
    assert stricter is None
    assert dataclasses.is_dataclass(v)


def test_rank_claims_are_peeked_without_parsing_the_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    import orjson

    from gpuadvisor.trace import load as load_mod

    st = _two_steps(SyntheticTrace(rank=3, world_size=4))
    head_first = tmp_path / "head.json.gz"
    head_first.write_bytes(gzip.compress(orjson.dumps({**st.top, "traceEvents": st.events})))
    assert load_mod.peek_rank_claim(head_first) == mr.RankClaim("head.json.gz", 3, 4)
    tail_last = tmp_path / "tail.json"
    tail_last.write_bytes(orjson.dumps({"traceEvents": st.events, "distributedInfo": {"rank": 3}}))
    assert load_mod.peek_rank_claim(tail_last) is None  # only a full load can tell
    bare = tmp_path / "worker0.json"
    bare.write_bytes(orjson.dumps(st.events))
    assert load_mod.peek_rank_claim(bare) == mr.RankClaim("worker0.json", None)
    # a folder of files that all say no rank is refused before any of them is parsed
    folder = tmp_path / "runs"
    folder.mkdir()
    for i in range(3):
        (folder / f"model{i}.json").write_bytes(orjson.dumps(st.events))

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed a trace of a folder that cannot be one job")

    monkeypatch.setattr(load_mod, "load_trace", no_load)
    with pytest.raises(InputError, match=r"model0\.json, model1\.json, model2\.json say no rank"):
        load_traces(folder)
