"""The advice on real recordings: every run in sample_runs/ (real H200 and H100 recordings made with
`gpuadvisor profile`, see sample_runs/README.md) analyzed with the current rules, the way a user's run
is (the capture's own reference steps, no measured step time given), against what was measured on the
same kind of GPU (docs/measurements/measure-*.jsonl, benchmarks/measure.py: plain python, 3 repeats;
a later file replaces an earlier one's variants: the H100 file holds the workloads re-recorded there).

- planted runs: the top finding names the fix that measured best (its remedy, or a remedy of the same
  problem category: bf16 where TF32 measured best), when some planted fix paid at all;
- controls: no high or medium finding;
- fixed variants: the gain of the planted run's top remedy at least halved;
- a few checks of what a finding points at (file and line) and of `diff`.

The workloads whose top finding is known to be wrong are strict xfails with the reason: when a
rule change fixes one, the xfail fails and must be removed. These are the acceptance checks of
docs/calibration.md; they fail if a rule change makes gpuadvisor rank a real problem wrongly or speak
up on a well-tuned run.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.result import AnalysisResult
from gpuadvisor.testing import share_fields_over_one, shares_over_the_whole, step_numbers_without_base
from tests.compared import same_number_comparisons
from tests.sample_results import analyzed

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_runs"
MEASUREMENTS = sorted((ROOT / "docs" / "measurements").glob("measure-h200-*.jsonl")) + sorted(
    (ROOT / "docs" / "measurements").glob("measure-h100-*.jsonl")
)
sys.path.insert(0, str(ROOT / "benchmarks"))

import calibrate  # noqa: E402
from catalog import CATALOG, Workload  # noqa: E402

RECORDED = [w for w in CATALOG if (SAMPLES / f"{w.name}-planted").is_dir()]
# Recorded planted only (issue 41, H200, 2026-11-28: benchmarks/gpu_issue41.sh records what the replay
# predicts from; the fixed variants were measured, not recorded)
PLANTED_ONLY = {"gn_unet_bf16", "mse_wide_head", "gpt_checkpointed", "big_checkpoint", "empty_cache_loop", "item_blocks_prep"}
PLANTED = [w for w in RECORDED if not w.control]
CONTROLS = [w for w in RECORDED if w.control]

# Workloads whose top finding is known to be wrong (strict xfail, with the reason). dlrm was here until the
# graphs' input copies and the foreach->fused factor by optimizer class (docs/model.md).
KNOWN_WRONG_TOP: dict[str, str] = {
    # recorded on an H200 2026-11-28 (issue 41): removing the two per-step .item() reads measured 1.37x
    # (27%); GA201 prices only the time the main thread blocks in the reads (7%), not the background
    # prefetcher's preparation that the reads keep from overlapping the GPU, and GA501 (launch-bound,
    # 27%, not measured) ranks first
    "item_blocks_prep": "GA201 prices the blocked reads (7%), not the prefetch overlap they cost (27% measured)",
}
# mse_wide_head was here until GA1106 reported a chain run once per step that takes a quarter of the step or
# more (its hand-written squared error: 41% of the replayed step) and the host that ran ahead of the GPU in
# its window stopped being read as a disagreement of the step times.

# One workload of each kind runs in the quick tier (`pytest -m "not slow"`); all of them run in CI.
QUICK = {"sync_bound", "control_convnet", "transfer_bound"}


def _tiered(ws: list[Workload]) -> list[Any]:
    return [pytest.param(w, id=w.name, marks=() if w.name in QUICK else pytest.mark.slow) for w in ws]


@functools.cache
def _measurements() -> dict[tuple[str, str], dict[str, Any]]:
    return calibrate.load_measurements(MEASUREMENTS)


def _result(name: str) -> AnalysisResult:
    return analyzed(name)


@functools.cache
def _check(name: str) -> calibrate.WorkloadCheck:
    w = next(w for w in CATALOG if w.name == name)
    _, check = calibrate.analyze_workload(w, SAMPLES, _measurements(), reference="capture", analyzed=analyzed)
    assert check is not None, f"{name}: no planted recording"
    return check


def test_the_samples_and_measurements_are_here() -> None:
    assert len(PLANTED) >= 20 and len(CONTROLS) >= 5, (len(PLANTED), len(CONTROLS))
    assert MEASUREMENTS, "docs/measurements/measure-*.jsonl missing"
    for w in PLANTED:
        assert (SAMPLES / f"{w.name}-fixed").is_dir() != (w.name in PLANTED_ONLY), w.name
        assert (w.name, "planted") in _measurements(), f"{w.name}: not measured"


@pytest.mark.parametrize("w", _tiered(PLANTED))
def test_top_finding_names_the_fix_that_measured_best(w: Workload) -> None:
    check = _check(w.name)
    if check.top_matches is None:
        pytest.skip(f"{w.name}: no planted fix paid on the H200 (best {check.best_fix} {check.best_measured})")
    if w.name in KNOWN_WRONG_TOP:
        assert not check.top_matches, f"{w.name} is right now: remove it from KNOWN_WRONG_TOP"
        pytest.xfail(KNOWN_WRONG_TOP[w.name])
    assert check.top_matches, (
        f"{w.name}: top finding {check.top_rule} {check.top_remedy} ({check.top_category}), best measured "
        f"fix {check.best_fix} ({check.best_remedy}, {check.best_category}) {check.best_measured:.0%}"
    )
    top = next(f for f in _result(f"{w.name}-planted").findings if f.rule == check.top_rule)
    assert top.recommendation and top.evidence and top.prediction is not None


@pytest.mark.parametrize("w", _tiered(CONTROLS))
def test_controls_stay_quiet(w: Workload) -> None:
    result = _result(f"{w.name}-planted")
    loud = [f for f in result.findings if f.severity.value in ("high", "medium")]
    assert not loud, f"{w.name}: " + "; ".join(f"{f.rule} {f.severity.value} {f.impact}" for f in loud)


def _remedy_impact(result: AnalysisResult, remedy: str) -> float:
    return max((f.impact or 0.0 for f in result.findings if f.remedy == remedy), default=0.0)


@pytest.mark.parametrize(
    "w", _tiered([w for w in PLANTED if w.name not in KNOWN_WRONG_TOP and w.name not in PLANTED_ONLY])
)
def test_fix_shrinks_the_planted_problem(w: Workload) -> None:
    """The remedy the planted run's top finding names gains at most half as much on the fixed run.
    Not for a larger batch: the fixed variants take one step up a continuum (tutorial_cnn 4 -> 256,
    two_tower 64 -> 4096) and stay host-bound on the H200 at that batch, which GA401 rightly says."""
    check = _check(w.name)
    if check.top_matches is None:
        pytest.skip(f"{w.name}: no planted fix paid on the H200")
    # The fixed run applies the planted fixes: the remedy checked is the top finding's when it is one of
    # them or of a planted problem's category (bf16 for a planted TF32 fix), else (a top finding tied
    # with them, or ranked by a group of remedies the catalog measures as probes: dlrm's launch
    # overhead) the planted fix that measured best.
    remedy = check.top_remedy or ""
    if remedy not in {p.remedy for p in w.problems} and check.top_category not in {p.category for p in w.problems}:
        meas = _measurements()
        gains = {
            p.remedy: calibrate.recovered(meas[(w.name, p.fix)].get("speedup_median")) or 0.0
            for p in w.problems
            if (w.name, p.fix) in meas
        }
        remedy = max(gains, key=lambda r: gains[r]) if gains else remedy
    if remedy == "larger_batch":
        pytest.skip(f"{w.name}: a larger batch is a continuum (see the docstring)")
    planted = _remedy_impact(_result(f"{w.name}-planted"), remedy)
    fixed = _remedy_impact(_result(f"{w.name}-fixed"), remedy)
    assert planted > 0 and fixed <= planted / 2, f"{w.name}: {remedy} impact {planted:.2f} -> {fixed:.2f}"


def test_pageable_copy_finding_points_at_the_users_copy_line() -> None:
    result = _result("transfer_bound-planted")
    files = [loc for f in result.findings for loc in f.locations if loc.file]
    assert any(loc.file.endswith("transfer_bound.py") and loc.line for loc in files), files


def test_sync_finding_names_the_item_lines() -> None:
    result = _result("sync_bound-planted")
    ga201 = [f for f in result.findings if f.rule == "GA201"]
    assert ga201, [f.rule for f in result.findings]
    lines = {loc.line for loc in ga201[0].locations if loc.file and loc.file.endswith("sync_bound.py")}
    source = (ROOT / "benchmarks/workloads/sync_bound.py").read_text()
    item_lines = {i for i, text in enumerate(source.splitlines(), 1) if ".item()" in text}
    assert lines and lines <= item_lines, (lines, item_lines)


def test_diff_of_planted_and_fixed_shows_the_improvement() -> None:
    from gpuadvisor.diff import diff_results

    delta = diff_results(_result("transfer_bound-planted"), _result("transfer_bound-fixed"))
    assert delta.step_time is not None and delta.step_time.delta_ms < 0
    assert delta.step_time.beyond_noise is True
    resolved = {f.rule for f in delta.resolved_findings}
    assert "GA102" in resolved, resolved


def test_the_headline_step_is_the_unprofiled_one() -> None:
    """Terminal, Markdown, the HTML verdict and `diff` lead with the step the run ran outside the
    profiler, the mean step of the run (issue 38); the profiled step is said as such (issue 30 item 2:
    sync_bound-planted said "step 28.37 ms" against 9.35 ms unprofiled, and diff compared -75.2% where the
    run got -67%)."""
    from gpuadvisor.diff import diff_results
    from gpuadvisor.render import markdown, text
    from gpuadvisor.render.html import _verdict

    planted = _result("sync_bound-planted")
    unprofiled = planted.metrics["unprofiled_step_time_ms"]
    profiled = planted.metrics["step_time_ms"]
    mean = planted.metrics["run_mean_step_ms"]
    assert unprofiled < 0.5 * profiled  # the profiler's cost on this host-bound run
    assert mean == pytest.approx(unprofiled, rel=0.02)  # no stalls, no costs between steps
    said = f"{mean:.2f} ms (mean of the run; {profiled:.2f} ms profiled)"
    assert f"Metrics: step {said}" in text.render(planted)
    assert f"step time {said}" in markdown.render(planted)
    verdict = _verdict(planted)
    assert verdict["step_time"] == f"{mean:.2f} ms" and "mean of the run" in verdict["step_time_note"]
    # GA201's idle time is a share of the profiled step, and says so
    ga201 = next(f for f in planted.findings if f.rule == "GA201")
    assert f"of the {profiled:.1f} ms profiled step" in ga201.message
    delta = diff_results(planted, _result("sync_bound-fixed"))
    assert delta.step_time is not None and delta.step_time.basis == "unprofiled"
    assert delta.step_time.base_ms == pytest.approx(unprofiled)
    assert delta.profiled_step_time is not None and delta.profiled_step_time.base_ms == pytest.approx(profiled)


@pytest.mark.parametrize(
    ("run", "rule"),
    [
        ("dataloader_bound-planted", "GA301"),
        pytest.param("lightning_autoencoder-fixed", "GA301", marks=pytest.mark.slow),
        pytest.param("fp32_transformer-planted", "GA701", marks=pytest.mark.slow),
    ],
)
def test_a_title_whose_share_is_not_the_impact_says_which_is_which(run: str, rule: str) -> None:
    """Issue 30 item 3: "waits for data 44%" with an impact of 88%, "FP32 matmuls (8% of the step):
    bf16 saves 15%". The share is of the profiled trace's step (GA301) or of the replayed step (GA701's
    kernel time: issue 41), the impact a predicted gain on the run's unprofiled step: the title names both."""
    f = next(f for f in _result(run).findings if f.rule == rule)
    assert f.impact is not None
    step = "replayed step" if rule == "GA701" else "profiled step"
    assert step in f.title and f"predicted to save {100 * f.impact:.0f}% of the mean step" in f.title, f.title


@pytest.mark.parametrize(
    "run", ["transfer_bound-planted", pytest.param("ddp_straggler-planted", marks=pytest.mark.slow)]
)
def test_gpu_busy_is_compute_not_copies_or_collectives(run: str) -> None:
    """Issue 30 item 4: transfer_bound read "GPU busy 92%" while 83% of its step was copies, and
    ddp_straggler "GPU busy 99.9%" while its ranks waited in NCCL most of the step."""
    m = _result(run).metrics
    assert m["gpu_active_fraction"] > 0.8  # the GPU ran something most of the step...
    assert m["gpu_busy_fraction"] < 0.2  # ...but little of it was compute
    other = m["copy_exposed_fraction"] if run.startswith("transfer") else m["collective_exposed_fraction"]
    assert other > 0.6
    parts = m["gpu_busy_fraction"] + m["collective_exposed_fraction"] + m["copy_exposed_fraction"]
    assert parts == pytest.approx(m["gpu_active_fraction"], abs=1e-6)


@pytest.mark.slow
def test_ddp_straggler_is_found_across_real_nccl_ranks() -> None:
    """2x H200, NCCL, one trace per rank in one run directory (gpuadvisor profile --nproc-per-node 2)."""
    result = _result("ddp_straggler-planted")
    assert result.source.ranks == (0, 1)
    top = result.findings[0]
    assert top.rule == "GA1002" and top.severity.value == "high", [f.rule for f in result.findings]
    assert top.evidence["straggler_rank"] == 1
    # Inside the window rank 1 is 97 ms late (the profiler's stop is in no step); the unprofiled steps
    # (72 ms) bound it to 66 ms without the profiler: 91% of the step, where the fix measured 9.86x (90%
    # recovered).
    assert top.evidence["late_ms_per_step"] < top.evidence["late_ms_per_step_in_window"]
    assert top.impact == pytest.approx(0.90, abs=0.03)
    # The fixed run's lateness (10.6 ms, inside the window only) is the profiler's: outside it the
    # unprofiled step (9.6 ms) leaves at most 5.0 ms beyond the others' compute and the collective, half
    # the step, what a healthy job's host overhead leaves (it runs without a straggler plain): info, no
    # gain claimed (issue 16; see sample_runs/ddp_straggler-fixed/README.md).
    fixed = [f for f in _result("ddp_straggler-fixed").findings if f.rule == "GA1002"]
    assert len(fixed) == 1 and fixed[0].severity.value == "info" and fixed[0].impact is None
    ev = fixed[0].evidence
    assert ev["max_late_ms_per_step_outside_window"] < 0.6 * ev["unprofiled_step_ms"]


@pytest.mark.slow
def test_ddp_straggler_names_the_slow_ranks_extra_host_work_and_where() -> None:
    """Issue 42 item 3: GA1002 said "rank 1", raw JSON and a DistributedSampler example, a cause it had
    ruled out. Rank 1 of the recording normalizes each of its 512 samples on the host (the planted
    `slow_transform()`, ddp_straggler.py:96) before it copies the batch at line 98."""
    from gpuadvisor.render.html import render_html

    result = _result("ddp_straggler-planted")
    top = result.findings[0]
    assert top.rule == "GA1002"
    ops = top.evidence["extra_cpu_ops"]
    assert {"aten::mean", "aten::std"} <= set(ops) and ops["aten::mean"]["calls_per_step"] == 512
    assert top.evidence["share_before_batch_copy"] > 0.9
    assert top.evidence["extra_ms_to_batch_copy"] > 100  # 107 ms: rank 0 copies its batch 2-3 ms into a step
    where = top.locations[0]
    assert (where.file, where.line) == ("benchmarks/workloads/ddp_straggler.py", 98)
    assert "aten::mean x512" in top.message and "batch's preparation" in top.message
    assert "DistributedSampler" not in top.recommendation and "ddp_straggler.py:98" in top.recommendation
    page = render_html(result, generated_at="x")
    card = page.split('class="ga-card ga-finding ')[1]
    # the report shows what the run recorded, never a file of this machine (issue 39): this recording
    # predates the recorded snippets (2 lines either side of a call site since then, which hold line 97's
    # `x = slow_transform(x, straggle_ms)`), so the card holds line 98 and says so
    assert "x, y = x.to(device, non_blocking=True)" in card and "the recorded line only" in card
    assert "slow_transform" not in card
    assert "DistributedSampler" not in card.split("Rule documentation")[0]


# The recordings whose batches change shape from step to step: varlen_memory pads each batch to its
# longest sequence, multiscale_memory draws a new resolution per batch, moe_nonzero's experts get a
# data-dependent number of tokens (its fixed run routes with static shapes).
SHAPES_VARY = {
    "varlen_memory-planted", "varlen_memory-fixed", "multiscale_memory-planted", "multiscale_memory-fixed",
    "moe_nonzero-planted",
}  # fmt: skip


@pytest.mark.slow
def test_launch_patterns_tell_which_recordings_change_shape_between_steps() -> None:
    """StepModel.shapes_vary over every real recording: true exactly where the workload's batches change
    shape (read from the kernels' grids, not from record_shapes)."""
    vary = set()
    for run in sorted(p.name for p in SAMPLES.iterdir() if (p / "manifest.json").is_file()):
        detail = _result(run).metrics_detail
        assert detail is not None
        if detail.model.shapes_vary:
            vary.add(run)
    assert vary == SHAPES_VARY


def test_launch_bound_with_changing_shapes_claims_no_compile_gain() -> None:
    """varlen_memory: launch-bound (86% of the step idle waiting for launches), but a new sequence length
    every step; torch.compile(mode="reduce-overhead") ran out of memory there on the H100
    (docs/measurements/measure-h100-6-compile.jsonl): GA501 is info, with no gain."""
    ga501 = [f for f in _result("varlen_memory-planted").findings if f.rule == "GA501"]
    assert len(ga501) == 1 and ga501[0].severity.value == "info" and ga501[0].impact is None
    assert ga501[0].evidence["launch_patterns"] > 1 and ga501[0].remedy is None


def test_compile_prediction_against_the_compiled_run_of_the_same_machine() -> None:
    """dlrm_compile_pair (sample_runs/dlrm_compile_pair-*/README.md): dlrm as written and with
    `--compile`, recorded back to back on one H100. GA501's impact, predicted from the planted
    recording, against the share of the step compiling recovered there: 1 - the compiled run's
    reference step / the planted run's (each timed by the capture without the profiler)."""
    planted = _result("dlrm_compile_pair-planted")
    compiled = _result("dlrm_compile_pair-compiled")
    ga501 = [f for f in planted.findings if f.rule == "GA501"]
    assert len(ga501) == 1 and ga501[0].impact is not None
    models = [r.metrics_detail.model for r in (planted, compiled) if r.metrics_detail is not None]
    assert len(models) == 2 and all(m.unprofiled_step_ms for m in models)
    measured = 1.0 - float(models[1].unprofiled_step_ms or 0) / float(models[0].unprofiled_step_ms or 1)
    assert 0.08 < measured < 0.2, measured  # the recordings: 19.42 ms -> 16.82 ms
    assert abs(ga501[0].impact - measured) <= 0.05, (ga501[0].impact, measured)
    # the compiled run is compiled already: no compile advice there
    assert not [f for f in compiled.findings if f.rule == "GA501" and f.severity.value != "info"]


def test_a_finding_ranked_by_its_group_says_so_in_every_format() -> None:
    """dlrm: GA501 and GA502 (launch overhead, 13% each) rank above GA102 (15%) because they are one
    problem whose fixes together are predicted to save 26%; the terminal, Markdown and HTML say so on
    the group's first finding, and only there."""
    from gpuadvisor.model import group_note
    from gpuadvisor.render import markdown, text
    from gpuadvisor.render.html import render_html

    result = _result("dlrm-planted")
    rules = [f.rule for f in result.findings]
    ga102 = next(f for f in result.findings if f.rule == "GA102")
    first, second = (f for f in result.findings if f.group == "launch_overhead")
    assert {first.rule, second.rule} == {"GA501", "GA502"}
    assert rules.index(first.rule) < rules.index(second.rule) < rules.index("GA102")
    assert (first.impact or 0) < (ga102.impact or 0) and (second.impact or 0) < (ga102.impact or 0)
    note = group_note(first, result.findings)
    assert note is not None and f"with {second.rule}" in note
    combined = first.prediction["group_recovered_fraction"] if first.prediction else None
    assert combined is not None and f"{100 * combined:.0f}% of the mean step" in note
    assert group_note(second, result.findings) is None  # said once, on the group's first finding
    assert group_note(ga102, result.findings) is None
    assert note in " ".join(text.render(result, verbose=True).split())
    assert "combined gain" in text.render(result)
    said = f"Ranked as one problem (launch overhead) with {second.rule}"
    assert said in markdown.render(result)
    assert said in render_html(result, generated_at="x")
    # a run whose findings rank by their own impact carries no such note (triton_loss: GA601 alone;
    # low_occupancy-planted, used here before issue 31, now has two kernel_efficiency findings, a group)
    plain = _result("triton_loss-planted")
    assert plain.findings and all(group_note(f, plain.findings) is None for f in plain.findings)
    assert "combined gain" not in text.render(plain)


def test_lightnings_closure_is_not_the_optimizers_update() -> None:
    """lightning_autoencoder (the Lightning README's model at batch 1): Lightning runs the training step
    and the backward inside `optimizer.step(closure)`. GA502 used to count them as the update ("34
    kernels per Adam.step", 78% claimed; issue 10 saw "104% of the step"); Adam(fused=True) measured
    1.06x on an H100 (docs/measurements/measure-h100-9-lightning.jsonl)."""
    ga502 = next(f for f in _result("lightning_autoencoder-planted").findings if f.rule == "GA502")
    assert ga502.impact is not None
    measured = calibrate.recovered(_measurements()[("lightning_autoencoder", "fused_adam")]["speedup_median"])
    assert measured is not None and abs(ga502.impact - measured) <= 0.1, (ga502.impact, measured)
    # the update's kernels: Adam's foreach ops over 4 parameter tensors, not the forward and backward
    assert ga502.evidence["optimizer_kernels_per_step"] <= 10


def _recordings_by_gpu() -> dict[str, list[str]]:
    """Run directory names by the GPU their environment.json recorded (first GPU; "H100"/"H200")."""
    import json

    out: dict[str, list[str]] = {}
    for run in sorted(p for p in SAMPLES.iterdir() if p.is_dir()):
        env = json.loads((run / "environment.json").read_text(encoding="utf-8"))
        name = str((env.get("gpus") or [{}])[0].get("name") or "no GPU")
        kind = next((k for k in ("H100", "H200") if k in name), name)
        out.setdefault(kind, []).append(run.name)
    return out


def test_the_readmes_count_the_recordings_by_gpu_as_the_recordings_say() -> None:
    """README.md and sample_runs/README.md say how many recordings came from which GPU, counted from
    environment.json (issue 30 item 9: they disagreed with each other and with the directories)."""
    import re

    by_gpu = _recordings_by_gpu()
    total = sum(len(v) for v in by_gpu.values())
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(
        r"the (\d+) real recordings in `sample_runs/` \((\d+) on an NVIDIA H200, (\d+) on an NVIDIA H100\)",
        readme,
    )
    assert m, (
        "README.md must say 'the N real recordings in `sample_runs/` (A on an NVIDIA H200, B on an NVIDIA H100)'"
    )
    said = tuple(int(g) for g in m.groups())
    assert said == (total, len(by_gpu.get("H200", [])), len(by_gpu.get("H100", []))), by_gpu
    samples = (SAMPLES / "README.md").read_text(encoding="utf-8")
    m = re.search(r"(\d+) of them on an NVIDIA H100", samples)
    assert m and int(m.group(1)) == len(by_gpu.get("H100", [])), by_gpu.get("H100")
    assert set(by_gpu) <= {"H100", "H200"}, f"a recording from another GPU: update both READMEs ({by_gpu})"


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(n, marks=() if n == "dlrm-planted" else pytest.mark.slow)
        for n in sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
    ],
)
def test_the_report_highlights_the_line_the_terminal_prints(run: str) -> None:
    """The HTML report shows the recorded line of every source location, never another line of today's
    file (issue 30 item 1: on 12 of 56 runs it highlighted the line now at the recorded number)."""
    from gpuadvisor.render.html import _location_view

    result = _result(run)
    for f in result.findings:
        for loc in f.locations:
            if not (loc.file and loc.line and loc.code):
                continue
            view = _location_view(loc, result)
            targets = [ln["text"].strip() for ln in view["lines"] if ln["target"]]
            assert targets == [loc.code.strip()], (f.rule, loc.label(), targets, view["source_note"])


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(n, marks=() if n in {f"{q}-planted" for q in QUICK} else pytest.mark.slow)
        for n in sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
    ],
)
def test_no_finding_compares_a_number_with_itself(run: str) -> None:
    """No title, message or recommendation reads "0.02 ms instead of 0.02 ms" or "2.61 -> 2.61 ms" (issue 30
    item 7: GA101 on lightning_autoencoder-fixed, GA301 on tutorial_cnn, GA401 on launch_bound)."""
    for f in _result(run).findings:
        for text in (f.title, f.message, f.recommendation, f.impact_explanation or ""):
            assert not same_number_comparisons(text), (f.rule, text)
        assert not re.search(r"(\d+\.\d+) ms per (?:\w+ )?step now, \1 ms per (?:\w+ )?step at", f.message), (f.rule, f.message)


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(n, marks=() if n in {f"{q}-planted" for q in QUICK} else pytest.mark.slow)
        for n in sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
    ],
)
def test_every_step_number_says_its_base(run: str) -> None:
    """Issue 42 item 2: a finding's title, message and fix say which step each number is of (the run's
    mean step a prediction is priced on, the profiled step a share is measured on, the replayed step,
    the time per sample): lightning_autoencoder-fixed read "waits for data 44% of the 11.7 ms profiled
    step; the fix is predicted to save 88%" (of the 5.44 ms mean step), and "Predicted gain: N% of the
    step" was in most rules' fixes."""
    for f in _result(run).findings:
        assert not step_numbers_without_base(f), (f.rule, step_numbers_without_base(f))


def test_every_share_says_its_base_on_two_tower() -> None:
    """Issue 42 item 2 (the parts that do not depend on which step is the base): GA401's impact is a
    share of the time per sample, and read "87.5% of step time"; the card's "GPU busy" (a share of the
    profiled steps) and GA401's "busy 25%" (of the replayed step) are two
    definitions, each now labelled."""
    from gpuadvisor.render.html import render_html
    from gpuadvisor.render.markdown import render as markdown

    result = _result("two_tower-planted")
    ga401 = next(f for f in result.findings if f.rule == "GA401")
    assert ga401.prediction is not None and ga401.prediction.get("per") == "sample"
    page = render_html(result, generated_at="x")
    card = page.split('class="ga-card ga-finding ')[1 + result.findings.index(ga401)]
    assert "impact: 87.5% of the time per sample" in card and "of step time" not in card
    assert "GPU busy (compute), share of the profiled steps" in page
    assert "busy 25% of the replayed step" in ga401.title and "25% of the replayed step" in ga401.message
    assert "| 87.5% per sample |" in markdown(result)


def test_the_base_helpers_say_the_base() -> None:
    from gpuadvisor.words import Base, duration_of, share_of

    assert share_of(0.44, Base.PROFILED_STEP) == "44% of the profiled step"
    assert share_of(0.875, Base.SAMPLE, 1) == "87.5% of the time per sample"
    assert share_of(0.0004, Base.MEAN_STEP, 1) == "<0.1% of the mean step"
    assert duration_of(11.7, Base.PROFILED_STEP) == "the 11.70 ms profiled step"
    assert duration_of(0.35, Base.SAMPLE) == "0.35 ms per sample"


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(n, marks=() if n in {f"{q}-planted" for q in QUICK} else pytest.mark.slow)
        for n in sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
    ],
)
def test_no_share_of_a_whole_passes_100_percent(run: str) -> None:
    """No "N% of the step/run", "saves N%" above 100% in a finding's words, and no share field above 1 in
    the result's JSON (findings and metrics): issue 41's "FP32 loss ... (169% of the step)"."""
    result = _result(run)
    for f in result.findings:
        assert not shares_over_the_whole(f), (f.rule, shares_over_the_whole(f))
    assert not share_fields_over_one(result.to_dict().get("metrics"), "metrics")


@pytest.mark.slow
def test_the_profilers_stop_is_in_no_step_and_no_finding() -> None:
    """Every recording ends with one `cudaDeviceSynchronize` right after the last ProfilerStep: the
    profiler's stop, called from the capture's step hook, waiting for the GPU's backlog (0.1-232 ms).
    It is the tool's cost: outside every analyzed step, in no host wait a rule reads, and GA202 never
    reports it (it did: "explicit synchronize at dlrm.py:156 opt.step()" on dlrm-fixed, whose script
    never synchronizes)."""
    runs = sorted(p.name for p in SAMPLES.iterdir() if (p / "manifest.json").is_file())
    checked = 0
    for run in runs:
        result = _result(run)
        detail = result.metrics_detail
        if detail is None or result.source.ranks != (0,):
            continue
        model = detail.model
        trace = model.trace
        rt = trace.runtime
        last_cpu_end = float(trace.steps["cpu_end"].max())
        stop = rt[(rt["ts"] >= last_cpu_end) & rt["name"].astype(str).str.contains("DeviceSynchronize")]
        assert len(stop) == 1, run
        ts = float(stop["ts"].iloc[0])
        assert not ((model.window.starts <= ts) & (ts < model.window.ends)).any(), run
        host = model.host
        assert not ((host["ts"] == ts) & (host["step"] >= 0)).any(), run
        assert all(f.rule != "GA202" for f in result.findings), (run, [f.title for f in result.findings])
        checked += 1
    assert checked >= 70


def test_timms_bursty_loader_is_priced_on_the_mean_step() -> None:
    """timm's train.py (ResNet-50, b128, 4 workers) on an H200 (issue 38): the workers deliver in bursts,
    every 4th step waits; the run is priced on its mean step and 8 workers are predicted from the
    loader's pace. Measured on the same host in the same session: -j 8 saved 25.0% (93.1 -> 69.8 ms)."""
    from gpuadvisor.remedies import RemedyId
    from gpuadvisor.stepmodel.predict import predict

    result = _result("timm_resnet50_j4-real")
    m = result.metrics
    assert m["run_stall_cause"] == "data" and m["run_stall_period"] == 4
    assert m["run_mean_step_ms"] > 1.3 * m["run_median_step_ms"]
    top = result.findings[0]
    assert top.rule == "GA301" and top.severity.value == "high" and "mean step" in top.title
    assert result.metrics_detail is not None
    model = result.metrics_detail.model
    eight = predict(model, RemedyId.DATALOADER_WORKERS, workers=8, current_workers=4).recovered_fraction
    assert abs(eight - (1 - 69.8 / 93.1)) <= 0.10, eight
    # behind the loader, the loop's own step: channels_last and bf16 pay once the workers keep up (their
    # rules stay quiet on the loader-bound mean step); the hand fix with them measured 3.36x there
    assert top.prediction is not None
    behind = {b["remedy"]: b["typical_speedup"] for b in top.prediction["behind_the_loader"]}
    assert behind["channels_last"] > 1.2 and behind["bf16_autocast"] > 1.05
    assert not any(f.rule in ("GA1102", "GA1103", "GA701") for f in result.findings)


def test_an_in_process_loader_is_priced_at_the_pace_it_runs_without_the_profiler() -> None:
    """The Lightning workload with its fixes (num_workers=0, H200, 2026-11-28): the loader waited 5.7 ms a
    step in __next__ under the profiler, 1.3 ms outside it; priced from the profiled wait, 8 workers were
    predicted to save 51% of the 5.0 ms step (2.03x). `gpuadvisor verify --only dataloader_workers` on the
    same GPU measured 1.13x (0.78-1.26, 3 trials): the prediction must be within 25 points of that."""
    from gpuadvisor.stepmodel.model import FIT_TOLERANCE

    result = _result("lightning_autoencoder_fixed_workers-real")
    assert result.metrics_detail is not None
    model = result.metrics_detail.model
    dt = model.data_time
    assert dt is not None and dt.profiled_ms == pytest.approx(5.73, abs=0.01)
    assert dt.unprofiled_ms == pytest.approx(1.33, abs=0.01)
    # the replay with the loader's real time meets the step measured outside the profiler (it was 2.15x
    # that step when the profiled wait was kept and read as a host running ahead)
    assert model.unprofiled_step_ms is not None
    assert model.baseline_step_ms == pytest.approx(model.unprofiled_step_ms, rel=0.10)
    assert model.replay_fit is not None and abs(model.replay_fit - 1.0) <= FIT_TOLERANCE
    ga301 = next(f for f in result.findings if f.rule == "GA301")
    assert ga301.impact is not None and ga301.prediction is not None
    measured = 1 - 1 / 1.13
    assert abs(ga301.impact - measured) <= 0.25, ga301.title
    assert ga301.prediction["speedup"] <= 1.45
    assert "a step without the profiler" in ga301.title and "Outside the profiler the loader took 1.33 ms" in ga301.message
    assert ga301.evidence["unprofiled_data_wait_ms_per_step"] == pytest.approx(dt.unprofiled_ms)


IN_PROCESS_PLANTED = ["dataloader_bound", "text_dataloader"]


@pytest.mark.parametrize("workload", IN_PROCESS_PLANTED)
def test_planted_in_process_loaders_keep_their_price(workload: str) -> None:
    """The planted in-process loaders (num_workers=0) were recorded before the capture timed the wait in
    __next__ outside the profiler: their loader time stays as recorded, GA301 fires, says nothing of an
    unprofiled wait, and its prediction stays close to the measured fix (docs/calibration.md)."""
    result = _result(f"{workload}-planted")
    assert result.metrics_detail is not None
    assert result.metrics_detail.model.data_time is None
    ga301 = next(f for f in result.findings if f.rule == "GA301")
    assert ga301.evidence["dataloader"]["num_workers"] == 0
    assert "without the profiler" not in ga301.title
    median, _, _ = _measured_alone("dataloader_workers")[workload]
    assert ga301.impact is not None and abs(ga301.impact - median) <= 0.15, (ga301.impact, median)


# ---- issue 41 (H200, 2026-11-28): channels_last against the measured conversion, the raw-trace pair, and
# what the planted-only recordings show -------------------------------------------------------------------


def _measured_alone(remedy: str) -> dict[str, tuple[float, float, float]]:
    """Workloads with a variant that applies `remedy` alone: (median, lowest, highest repeat) recovered."""
    out: dict[str, tuple[float, float, float]] = {}
    for (workload, _variant), rec in calibrate.load_measurements(MEASUREMENTS).items():
        if list(rec.get("remedies") or []) == [remedy]:
            got = [calibrate.recovered(rec.get(k)) for k in ("speedup_median", "speedup_min", "speedup_max")]
            if all(g is not None for g in got):
                out[workload] = (float(got[0] or 0), float(got[1] or 0), float(got[2] or 0))
    return out


CHANNELS_LAST_MEASURED = {
    w: m for w, m in _measured_alone("channels_last").items() if (SAMPLES / f"{w}-planted").is_dir()
}


def _channels_last_speedup(run: str) -> float:
    from gpuadvisor.remedies import RemedyId
    from gpuadvisor.stepmodel.predict import predict

    result = _result(run)
    assert result.metrics_detail is not None
    return predict(result.metrics_detail.model, RemedyId.CHANNELS_LAST).speedup


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=() if n == "gn_unet_bf16" else pytest.mark.slow)
        for n in sorted(CHANNELS_LAST_MEASURED)
    ],
)
def test_channels_last_advice_agrees_in_sign_with_the_measured_conversion(name: str) -> None:
    """Issue 41: converting a bf16 GroupNorm/interpolate UNet to channels_last measured 0.76x (gn_unet_bf16;
    the advice had said "saves 26%" on such a net); ResNet-50 FP32 and bf16 and a BatchNorm UNet measured
    1.42x, 1.86x, 2.38x. The replay of the conversion goes the way the measurement went, and GA1102
    speaks exactly where it paid."""
    median, low, high = CHANNELS_LAST_MEASURED[name]
    assert low > 0 or high < 0, f"{name}: the repeats disagree in sign"
    speedup = _channels_last_speedup(f"{name}-planted")
    assert (speedup > 1.0) == (median > 0), (name, speedup, median)
    advice = [f for f in _result(f"{name}-planted").findings if f.rule == "GA1102"]
    assert bool(advice) == (median > 0), (name, [f.title for f in advice])


def test_the_channels_last_measurements_cover_both_signs() -> None:
    assert {"gn_unet_bf16", "resnet50_bf16_nchw"} <= set(CHANNELS_LAST_MEASURED)


@pytest.mark.slow
def test_only_runs_with_cudnn_transposes_are_converted() -> None:
    """A run without cuDNN's layout transposes is channels_last already (control_convnet, control_resnet50,
    control_inference, the -fixed runs of the channels_last workloads) or has no NCHW convolutions: the
    replay of the conversion changes nothing there, and GA1102 never speaks (the NHWC table's ratios,
    applied to every 4-D op, had such runs 'gain' 5-7%)."""
    from gpuadvisor.stepmodel.layout import layout_transposes

    checked = 0
    for run in sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()):
        result = _result(run)
        if result.metrics_detail is None or result.source.ranks != (0,):
            continue
        if layout_transposes(result.metrics_detail.model).any():
            continue
        assert _channels_last_speedup(run) == pytest.approx(1.0), run
        assert all(f.rule != "GA1102" for f in result.findings), run
        checked += 1
    assert checked >= 50


def test_gn_unet_groupnorm_gives_back_nchw_and_the_convolutions_convert() -> None:
    """gn_unet_bf16 in channels_last: GroupNorm runs on NCHW copies on the GPU, so the upsampling, pooling and
    concatenations after it stay NCHW and the convolutions convert their inputs (5.8 ms per step at the
    table's conversion cost, where cuDNN's transposes took 6.3 ms); GroupNorm at the table's ratio for its
    activations. Measured 0.76x; the replay says 0.88x."""
    from gpuadvisor.stepmodel.layout import channels_last_plan

    result = _result("gn_unet_bf16-planted")
    assert result.metrics_detail is not None
    plan = channels_last_plan(result.metrics_detail.model)
    assert plan.breakers == {"group_norm"}
    by = {(f.family, f.dtype): f for f in plan.families}
    assert by[("upsample", "fp32")].nchw_share == pytest.approx(1.0)
    assert by[("group_norm", "fp32")].ratio is not None and by[("group_norm", "fp32")].ratio > 1.5
    assert 4000 < plan.conversion_us < 8000 and plan.saving_us < 0
    assert 0.8 < _channels_last_speedup("gn_unet_bf16-planted") < 0.95


def test_a_raw_trace_gets_the_busy_time_finding_of_its_profile_run() -> None:
    """Issue 41 item 6: gemm_odd_shapes under `gpuadvisor profile` and as a plain torch.profiler trace
    (record_shapes, no gpuadvisor in the process), recorded minutes apart on one H200. GA1104 is the top
    finding of both; the raw trace prices it lower (its host keeps the profiler's cost: the padded step
    replays at the profiled host's pace), and given the plain step time it prices it as the run does."""
    from gpuadvisor.analysis import analyze

    pair = SAMPLES / "gemm_odd_shapes_raw_pair-profiled"
    run = _result(pair.name)
    raw = analyze(pair / "raw_trace.json.gz")
    assert raw.source.kind == "trace"
    top_run, top_raw = run.findings[0], raw.findings[0]
    assert top_run.rule == top_raw.rule == "GA1104"
    assert top_run.severity.value == top_raw.severity.value == "high"
    run_impact, raw_impact = top_run.impact or 0.0, top_raw.impact or 0.0
    assert 0.3 < raw_impact < run_impact, (raw_impact, run_impact)
    # the same misaligned GEMMs, within the noise of two recordings
    key = "misaligned_time_per_step_us"
    assert top_raw.evidence[key] == pytest.approx(top_run.evidence[key], rel=0.05)
    priced = analyze(pair / "raw_trace.json.gz", step_time_ms=run.metrics["run_mean_step_ms"])
    ga1104 = next(f for f in priced.findings if f.rule == "GA1104")
    assert abs((ga1104.impact or 0.0) - run_impact) <= 0.05, (ga1104.impact, run_impact)
    # measured on the H200 (2026-11-26): padding saved 63%
    assert abs(run_impact - 0.63) <= 0.05


def _top(run: str) -> Any:
    return _result(run).findings[0]


def test_checkpointed_gpt_is_priced_by_its_recomputation() -> None:
    """gpt_checkpointed: every block under torch.utils.checkpoint, 4.6 GB peak of a 150 GB GPU. GA803 is the
    top finding and drops all of the recomputation (the saved activations fit)."""
    top = _top("gpt_checkpointed-planted")
    assert top.rule == "GA803" and top.remedy == "drop_activation_checkpointing"
    ev = top.evidence
    assert ev["recomputed_ops_per_step"] == 216 and ev["recompute_removed_fraction"] == 1.0
    assert ev["peak_allocated_bytes"] + ev["saved_activation_bytes"] < 0.1 * ev["memory_capacity_bytes"]


@pytest.mark.xfail(
    strict=True,
    reason="measured 53% (2.11x), GA803 prices 18%: the step is host-bound under the profiler (94 ms profiled, "
    "55.7 ms plain) and the recompute regions hold 19 ms of its host time; a recording of --fix no_checkpointing "
    "(H200, benchmarks/README.md) has 56.7 ms of profiled host work a step against 97.3: of the 40.6 ms removed, "
    "17.7 ms lie in the recompute regions and ~23 ms are checkpointing's own host cost outside them, unpriced",
)
def test_checkpointed_gpt_price_is_within_25_points_of_the_measurement() -> None:
    assert abs((_top("gpt_checkpointed-planted").impact or 0.0) - 0.53) <= 0.25


def test_empty_cache_in_the_loop_is_priced_by_its_removal() -> None:
    """empty_cache_loop: torch.cuda.empty_cache() after every step; removing it measured 1.41x (29%)."""
    top = _top("empty_cache_loop-planted")
    assert top.rule == "GA802" and top.remedy == "remove_empty_cache"
    assert top.evidence["free_time_outside_ops_fraction"] == 1.0
    assert abs((top.impact or 0.0) - 0.29) <= 0.05


def test_a_big_synchronous_save_names_the_background_save() -> None:
    """big_checkpoint: a 0.9 GB torch.save every 20 steps. GA304 names the background save, priced from the
    GPU bytes the capture recorded (copy to pinned memory on the step, the write off it)."""
    top = _top("big_checkpoint-planted")
    assert top.rule == "GA304" and top.remedy == "async_checkpoint"
    save = top.evidence["async_save"]
    assert top.evidence["occurrences"] == 4 and top.evidence["period_steps"] == 20
    assert save["bytes_basis"] == "gpu_tensors" and save["bytes_copied"] == 906264640


@pytest.mark.xfail(
    strict=True,
    reason="measured 39% (1.63x, band 1.40-2.02), priced 3.5%: the write is taken as the synchronous save less a "
    "pinned copy (1.40 s) and the next save, 52 ms later, waits for it; the measured loop lost about 0.96 s per "
    "save in the background against 1.85 s synchronously, so the synchronous save's own copy of the CUDA "
    "tensors to pageable memory took far longer than the capture can tell (it times the whole save only)",
)
def test_the_background_save_price_is_within_25_points_of_the_measurement() -> None:
    assert abs((_top("big_checkpoint-planted").impact or 0.0) - 0.39) <= 0.25


def test_a_squared_error_is_not_a_vocabulary_loss() -> None:
    """mse_wide_head: a hand-written FP32 squared error over [4096, 65536] outputs (issue 41 item 2: the loss
    rule matched any row-wise loss, '169% of the step'). GA1105 stays quiet; no finding claims it."""
    result = _result("mse_wide_head-planted")
    assert all(f.rule != "GA1105" for f in result.findings)


def test_a_hand_written_loss_is_compiled_where_it_runs() -> None:
    """mse_wide_head (REAL, H200): its squared error's forward and backward are 2 memory-bound chains a
    step, 41% of the replayed step; compiling the loss measured 1.52x (34%, 3 interleaved repeats). GA1106
    is the top finding, names the function to compile (not the model: the loss runs after its call) and is
    priced within 10 points of the measurement, on the GPU's pace: the window's host-timed steps (3.9 ms)
    were the host running ahead while the launch queue filled; without the profiler the loop ran 11.1 ms
    steps, which the replayed GPU work (11.0 ms) explains."""
    result = _result("mse_wide_head-planted")
    top = result.findings[0]
    assert top.rule == "GA1106" and top.remedy == "torch_compile"
    assert top.evidence["chains_per_step"] == 2
    assert "loss_fn = torch.compile(loss_fn)" in top.recommendation and "mse_wide_head.py:54" in top.recommendation
    assert abs((top.impact or 0.0) - 0.34) <= 0.10
    assert top.prediction is not None and top.prediction["baseline_step_ms"] == pytest.approx(11.08, abs=0.05)
    assert any(n.startswith("the host ran ahead of the GPU") for n in result.notes), result.notes
    assert not any(n.startswith("step times disagree") for n in result.notes)
    # MFU over the GPU's pace, not over the host's 3.9 ms steps (79%)
    assert result.metrics is not None and 0.2 < result.metrics["mfu"] < 0.35
