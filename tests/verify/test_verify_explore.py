"""`verify --explore`'s search, on fake trials (no processes): singles, greedy growth, a failing lever
dropped with its reason while the search goes on, the budget, and what it applies per configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.remedies import REMEDIES, RemedyId, explore_levers
from gpuadvisor.verify import explore as ex
from gpuadvisor.verify.probe import compare, describe
from gpuadvisor.verify.switches import ScriptOption

CUDA_ENV: dict[str, Any] = {
    "cuda_available": True,
    "settings": {"autocast": {"used": False}, "grad_scaler": {"used": False}, "torch_compile": {"used": False}},
    "dataloaders": [{"num_workers": 0, "pin_memory": False, "batch_size": 64}],
    "optimizers": [{"class": "AdamW", "fused": None, "foreach": None}],
}


def levers(only: tuple[str, ...], env: dict[str, Any] = CUDA_ENV, options: tuple[ScriptOption, ...] = ()) -> list[ex.ExploreLever]:
    return ex.build_levers(env, num_workers=8, env={}, bf16_supported=True, options=options, only=only)


class FakeTrials:
    """Step time of a configuration = baseline x the product of its levers' factors (x a tiny
    deterministic jitter per trial); `broken` levers fail."""

    def __init__(self, factors: dict[str, float], broken: dict[str, str] | None = None, wall: float = 1.0) -> None:
        self.factors = factors
        self.broken = broken or {}
        self.wall = wall
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
        self.calls.append(names)
        for n in names:
            if n in self.broken:
                return {"status": "failed", "reason": self.broken[n], "wall_s": self.wall}
        t = 100.0
        for n in names:
            t *= self.factors.get(n, 1.0)
        t *= 1.0 + 0.001 * (len(self.calls) % 3)
        return {"status": "ok", "step_time_ms": t, "samples_per_s": 64000.0 / t, "wall_s": self.wall, "changes": []}


def explorer(lvs: list[ex.ExploreLever], fake: FakeTrials, budget: float | None = None) -> ex.Explorer:
    clock = {"t": 0.0}

    def run_trial(names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
        clock["t"] += fake.wall
        return fake(names, timeout_s)

    def remaining() -> float | None:
        return None if budget is None else budget - clock["t"]

    return ex.Explorer(lvs, trials=3, run_trial=run_trial, remaining=remaining, say=lambda m: None, trial_timeout_s=60)


def applies() -> Any:
    return ex.applies_with(CUDA_ENV, num_workers=8, env={}, bf16_supported=True)


def test_greedy_growth_keeps_what_adds_and_stops_when_nothing_does() -> None:
    lvs = levers(("bf16_autocast", "channels_last", "num_workers", "fused_optimizer", "cudnn_benchmark"))
    fake = FakeTrials({"bf16_autocast": 0.7, "channels_last": 0.85, "num_workers": 0.9, "cudnn_benchmark": 1.0})
    e = explorer(lvs, fake)
    e.run(applies())
    assert e.best is not None
    assert set(e.best.levers) == {"bf16_autocast", "channels_last", "num_workers"}
    cmp = e.comparison(e.best)
    assert cmp.speedup == pytest.approx(1 / (0.7 * 0.85 * 0.9), rel=0.01)
    assert e.stopped == "no lever adds to the best configuration beyond noise"
    # the first growth step started from the best single and chose channels_last
    assert e.steps[0]["from"] == ["bf16_autocast"] and e.steps[0]["chosen"] == ["channels_last", "bf16_autocast"]


def test_a_failing_lever_is_dropped_with_its_reason_and_the_search_goes_on() -> None:
    lvs = levers(("bf16_autocast", "channels_last", "num_workers"))
    fake = FakeTrials(
        {"bf16_autocast": 0.7, "num_workers": 0.8},
        broken={"channels_last": "the script raised RuntimeError: required rank 4 tensor"},
    )
    e = explorer(lvs, fake)
    e.run(applies())
    failed = e.levers["channels_last"].failed
    assert failed is not None and "required rank 4" in failed
    assert e.configs[("channels_last",)].results and len(e.configs[("channels_last",)].results) == 1
    assert e.best is not None and set(e.best.levers) == {"bf16_autocast", "num_workers"}
    assert not any("channels_last" in c for c in fake.calls[4:] if len(c) > 1)


def test_dependent_levers_join_once_their_prerequisite_is_in() -> None:
    # prefetch_factor and persistent_workers need workers: not measured alone at num_workers=0,
    # candidates once num_workers is in the best configuration
    lvs = levers(("num_workers", "prefetch_factor", "persistent_workers"))
    assert {lv.name: lv.skip_reason is None for lv in lvs} == {
        "num_workers": True,
        "prefetch_factor": False,
        "persistent_workers": False,
    }
    fake = FakeTrials({"num_workers": 0.5, "persistent_workers": 0.6, "prefetch_factor": 1.0})
    e = explorer(lvs, fake)
    e.run(applies())
    assert e.best is not None and set(e.best.levers) == {"num_workers", "persistent_workers"}
    remedies, params, _flags = ex.trial_setup([e.levers[n] for n in ("num_workers", "prefetch_factor")])
    assert remedies == ("dataloader_workers",) and params == {
        "dataloader_workers": {"num_workers": "auto", "prefetch_factor": 4}
    }


def test_nothing_beyond_noise_means_no_best_configuration() -> None:
    lvs = levers(("fused_optimizer", "cudnn_benchmark"))
    e = explorer(lvs, FakeTrials({}))
    e.run(applies())
    assert e.best is None and e.stopped == "no lever measured faster than the baseline beyond noise"


def test_the_budget_stops_the_search_and_keeps_what_was_measured() -> None:
    lvs = levers(("bf16_autocast", "channels_last", "num_workers"))
    e = explorer(lvs, FakeTrials({"bf16_autocast": 0.7}), budget=5.5)
    e.run(applies())
    assert e.budget_hit and e.done == 5 and e.stopped == "the budget ended during the singles"
    assert len(e.baseline.results) == 2


def test_levers_of_one_switch_never_combine() -> None:
    by = {lv.name: lv for lv in levers(("torch_compile", "torch_compile_reduce_overhead", "num_workers", "prefetch_factor"))}
    assert ex.conflicts(by["torch_compile"], by["torch_compile_reduce_overhead"])
    assert not ex.conflicts(by["num_workers"], by["prefetch_factor"])
    assert not ex.conflicts(by["num_workers"], by["torch_compile"])


def test_larger_batch_is_measured_alone_never_combined() -> None:
    lvs = levers(("larger_batch", "num_workers"))
    e = explorer(lvs, FakeTrials({"larger_batch": 0.9, "num_workers": 0.5}))
    e.run(applies())
    assert e.best is not None and e.best.levers == ("num_workers",)
    assert e.configs[("larger_batch",)].results
    assert not any("larger_batch" in c and len(c) > 1 for c in e.configs)


def test_every_explore_lever_belongs_to_an_injectable_record() -> None:
    assert all(REMEDIES[spec.id].injectable for spec, _ in explore_levers())
    names = {lv.name for _, lv in explore_levers()}
    assert {"num_workers", "prefetch_factor", "persistent_workers", "dataloader_pin_memory", "bf16_autocast",
            "tf32", "channels_last", "torch_compile", "torch_compile_reduce_overhead", "fused_optimizer",
            "cudnn_benchmark", "expandable_segments", "larger_batch", "script_batch_size"} <= names  # fmt: skip


def test_fp16_is_measured_only_where_bf16_is_not() -> None:
    on_bf16 = ex.build_levers(CUDA_ENV, num_workers=8, env={}, bf16_supported=True, only=("fp16_autocast",))
    assert on_bf16[0].skip_reason is not None and "bf16" in on_bf16[0].skip_reason
    old = ex.build_levers(CUDA_ENV, num_workers=8, env={}, bf16_supported=False, only=("fp16_autocast", "bf16_autocast"))
    assert {lv.name: lv.skip_reason is None for lv in old} == {"bf16_autocast": False, "fp16_autocast": True}


def test_the_first_baseline_trial_comes_before_the_levers_are_chosen() -> None:
    lvs = levers(("tf32", "script_batch_size"))
    fake = FakeTrials({"tf32": 0.5, "script_batch_size": 1.0})
    seen: list[tuple[str, ...]] = []
    batch = ScriptOption(("--batch-size",), "batch_size", "value", value=8, type="int", seen_at_run_time=True)

    def on_baseline(result: dict[str, Any]) -> None:
        seen.append(tuple(fake.calls[-1]))
        ex.resolve_switches(lvs, [batch], [], num_workers=8, environment={**CUDA_ENV, "dataloaders": []})

    e = ex.Explorer(lvs, trials=2, run_trial=fake, remaining=lambda: None, say=lambda m: None, trial_timeout_s=60,
                    on_baseline=on_baseline)  # fmt: skip
    e.run(applies())
    assert seen == [()]  # called once, after the baseline's first trial, before any lever's
    assert fake.calls.count(()) >= 2 and fake.calls.count(("script_batch_size",)) == 2  # measured as a single


def test_machine_comparison() -> None:
    recorded = {"platform": "Linux-a", "cpu_count": 64, "torch": "2.11.0+cu130", "cuda_available": True,
                "gpus": ["NVIDIA H200"], "cwd": "/work/main"}  # fmt: skip
    same = {**recorded}
    assert compare(recorded, same) == []
    cpu = {"platform": "Linux-b", "cpu_count": 2, "torch": "2.13.0+cpu", "cuda_available": False, "gpus": [],
           "cwd": "/elsewhere"}  # fmt: skip
    diffs = compare(recorded, cpu)
    assert [d.split(":")[0] for d in diffs] == ["GPU", "torch", "machine", "working directory"]
    assert describe(cpu) == "CPU only, torch 2.13.0+cpu" and describe(recorded) == "NVIDIA H200, torch 2.11.0+cu130"
    assert compare(recorded, {"error": "no torch"})[0].startswith("this machine could not be probed")


def test_rule_ids_stay_verify_ids() -> None:
    assert RemedyId.PERSISTENT_WORKERS in {s.id for s, _ in explore_levers()}


def test_slow_levers_are_tried_last_on_top_of_the_best() -> None:
    lvs = levers(("bf16_autocast", "channels_last", "torch_compile"))
    fake = FakeTrials({"bf16_autocast": 0.7, "channels_last": 0.9, "torch_compile": 0.8})
    e = explorer(lvs, fake)
    e.run(applies())
    assert ("torch_compile",) not in fake.calls  # never measured alone
    first_compile = next(i for i, c in enumerate(fake.calls) if "torch_compile" in c)
    assert all("torch_compile" not in c for c in fake.calls[:first_compile])
    assert e.best is not None and set(e.best.levers) == {"bf16_autocast", "channels_last", "torch_compile"}
    # growth rounds re-measure the best but not the baseline
    assert fake.calls.count(()) == 3


def test_only_levers_not_slower_alone_are_candidates() -> None:
    lvs = levers(("bf16_autocast", "tf32", "expandable_segments"))
    fake = FakeTrials({"bf16_autocast": 0.7, "tf32": 1.1, "expandable_segments": 1.0})
    e = explorer(lvs, fake)
    e.run(applies())
    tried = {tuple(c["levers"]) for step in e.steps for c in step["candidates"]}
    assert not any("tf32" in t for t in tried)
    assert e.best is not None and e.best.levers == ("bf16_autocast",)


def test_verify_json_is_never_written_next_to_tracked_recordings(tmp_path: Path) -> None:
    import shutil
    import subprocess

    from gpuadvisor.errors import UsageError
    from gpuadvisor.verify.runner import output_path

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    run = tmp_path / "repo" / "run"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    assert output_path(run, None) == run / "verify.json"  # not in a repository
    repo = run.parent
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    assert output_path(run, None) == run / "verify.json"  # in one, not tracked
    subprocess.run(["git", "-C", str(repo), "add", "run/manifest.json"], check=True)
    with pytest.raises(UsageError, match="tracked by git"):
        output_path(run, None)
    assert output_path(run, tmp_path / "v.json") == tmp_path / "v.json"
    assert output_path(run, tmp_path) == tmp_path / "verify.json"


def test_a_growth_round_cut_by_the_budget_still_counts_with_two_trials_a_side() -> None:
    lvs = levers(("channels_last", "bf16_autocast"))
    # singles: 3 rounds x 3 configurations = 9 trials; growth: best + 1 candidate a round: 2 rounds = 4
    e = explorer(lvs, FakeTrials({"channels_last": 0.7, "bf16_autocast": 0.9}), budget=13.5)
    e.run(applies())
    assert e.stopped == "the budget ended while growing the combination"
    assert e.best is not None and set(e.best.levers) == {"channels_last", "bf16_autocast"}
    assert len(e.best.ok()) == 2


def test_a_lever_that_changes_how_steps_are_counted_is_failed() -> None:
    class Counted(FakeTrials):
        def __call__(self, names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
            out = super().__call__(names, timeout_s)
            out["step_detection"] = "forward" if "fused_optimizer" in names else "optimizer_step_hook"
            return out

    e = explorer(levers(("fused_optimizer", "bf16_autocast")), Counted({"fused_optimizer": 0.5, "bf16_autocast": 0.8}))
    e.run(applies())
    failed = e.levers["fused_optimizer"].failed
    assert failed is not None and "steps were counted differently" in failed
    assert e.best is not None and e.best.levers == ("bf16_autocast",)


def test_a_budget_that_ends_during_the_singles_keeps_the_best_single_with_two_trials_a_side() -> None:
    lvs = levers(("bf16_autocast", "channels_last", "num_workers"))  # measured as num_workers, CL, bf16
    # round 1: B NW CL bf16; round 2 cut after B NW CL: bf16 (fastest) has one trial, no verdict
    e = explorer(lvs, FakeTrials({"num_workers": 0.9, "channels_last": 0.6, "bf16_autocast": 0.5}), budget=7.5)
    e.run(applies())
    assert e.stopped == "the budget ended during the singles" and e.done == 7
    assert e.best is not None and e.best.levers == ("channels_last",) and len(e.best.ok()) == 2


def test_levers_a_finding_predicts_go_first_and_a_predicted_slow_lever_is_measured_alone() -> None:
    lvs = levers(("bf16_autocast", "fused_optimizer", "torch_compile", "torch_compile_reduce_overhead"))
    fake = FakeTrials({"bf16_autocast": 1.0, "fused_optimizer": 0.5, "torch_compile_reduce_overhead": 0.2})
    predicted = {"torch_compile": 3.0, "torch_compile_reduce_overhead": 3.0, "fused_optimizer": 1.5}
    clock = {"t": 0.0}

    def run_trial(names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
        clock["t"] += 1.0
        return fake(names, timeout_s)

    e = ex.Explorer(
        lvs, trials=3, run_trial=run_trial, remaining=lambda: None, say=lambda m: None, trial_timeout_s=60, predicted=predicted
    )
    e.run(applies())
    # the predicted levers by predicted gain, all their trials interleaved with the baseline's; then the
    # rest beside a baseline measured again
    predicted_round = [(), ("torch_compile",), ("torch_compile_reduce_overhead",), ("fused_optimizer",)]
    assert fake.calls[:12] == predicted_round * 3
    assert fake.calls[12:18] == [(), ("bf16_autocast",)] * 3
    assert e.best is not None and set(e.best.levers) == {"torch_compile_reduce_overhead", "fused_optimizer"}


def test_a_short_budget_still_gives_the_predicted_lever_its_verdict() -> None:
    # dataloader_bound on the H200 with 180 s: one round of ten singles used the budget and no lever had
    # two trials; predicted first, the predicted lever is measured three times beside the baseline
    lvs = levers(("num_workers", "tf32", "bf16_autocast", "fused_optimizer", "expandable_segments"))
    fake = FakeTrials({"num_workers": 0.2})
    e = ex.Explorer(lvs, trials=3, run_trial=_clocked(fake, 1.0)[0], remaining=_clocked(fake, 1.0)[1],
                    say=lambda m: None, trial_timeout_s=60, predicted={"num_workers": 7.75})  # fmt: skip
    e.run(applies())
    assert e.stopped == "the budget ended during the singles"
    assert e.best is not None and e.best.levers == ("num_workers",) and len(e.best.ok()) == 3


def _clocked(fake: FakeTrials, budget_trials: float) -> tuple[Any, Any]:
    """run_trial and remaining() over a shared clock: `budget_trials` x 8 trials of budget."""
    clock = fake.__dict__.setdefault("_clock", {"t": 0.0})

    def run_trial(names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
        clock["t"] += fake.wall
        return fake(names, timeout_s)

    return run_trial, lambda: 8.0 * budget_trials - clock["t"]


def test_without_predictions_slow_levers_still_wait() -> None:
    lvs = levers(("fused_optimizer", "torch_compile"))
    fake = FakeTrials({"fused_optimizer": 0.5, "torch_compile": 0.5})
    e = explorer(lvs, fake)
    e.run(applies())
    assert ("torch_compile",) not in fake.calls


def test_a_predicted_slow_lever_measured_alone_joins_the_growth_like_any_other() -> None:
    # launch_bound on the H200: fused_optimizer alone 2.02x, compile (reduce-overhead) alone 1.69x,
    # both together several times faster; the measured compile lever must be a growth candidate
    lvs = levers(("fused_optimizer", "tf32", "torch_compile", "torch_compile_reduce_overhead"))
    fake = FakeTrials({"fused_optimizer": 0.5, "torch_compile_reduce_overhead": 0.6, "torch_compile": 0.9})
    predicted = {"fused_optimizer": 2.0, "torch_compile": 1.7, "torch_compile_reduce_overhead": 1.7}

    def run_trial(names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
        return fake(names, timeout_s)

    e = ex.Explorer(
        lvs, trials=3, run_trial=run_trial, remaining=lambda: None, say=lambda m: None, trial_timeout_s=60, predicted=predicted
    )
    e.run(applies())
    assert e.steps[0]["from"] == ["fused_optimizer"]
    assert ["fused_optimizer", "torch_compile_reduce_overhead"] in [c["levers"] for c in e.steps[0]["candidates"]]
    assert e.best is not None and set(e.best.levers) == {"fused_optimizer", "torch_compile_reduce_overhead"}
    assert not any({"torch_compile", "torch_compile_reduce_overhead"} <= set(c) for c in fake.calls)


class BatchTrials:
    """Samples/s of a batch rung = baseline x min(multiplier, `cap`) (the GPU saturates at `cap` x the
    batch); `oom` multipliers fail like an out-of-memory trial. Step time stays ~ constant."""

    def __init__(self, cap: float, oom: int | None = None) -> None:
        self.cap, self.oom = cap, oom
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
        self.calls.append(names)
        m = 1
        for n in names:
            m = int(n.split("@x")[1]) if "@x" in n else (8 if n == "larger_batch" else m)
        if self.oom is not None and m >= self.oom:
            return {"status": "failed", "reason": "the script raised OutOfMemoryError", "wall_s": 1.0}
        jitter = 1.0 + 0.001 * (len(self.calls) % 3)
        return {"status": "ok", "step_time_ms": 10.0 * jitter, "samples_per_s": 1000.0 * min(m, self.cap) / jitter,
                "wall_s": 1.0, "changes": []}  # fmt: skip


def batch_explorer(fake: BatchTrials) -> ex.Explorer:
    return ex.Explorer(levers(("larger_batch",)), trials=3, run_trial=fake, remaining=lambda: None, say=lambda m: None,
                       trial_timeout_s=60, batch_multiplier=8, predicted={"larger_batch": 8.0})  # fmt: skip


def test_the_batch_ladder_climbs_while_samples_per_s_scale() -> None:
    fake = BatchTrials(cap=30.0)
    e = batch_explorer(fake)
    e.run(applies())
    # x8 gave 8x (>= half of 8): x32 next, 30x (> x8): x128 next, no faster than x32: the ladder ends
    assert e.rungs == ["larger_batch@x32", "larger_batch@x128"]
    assert e.comparison(e.config(("larger_batch@x32",))).speedup == pytest.approx(30.0, rel=0.01)
    assert e.best is None  # a batch is never the best configuration: it is reported beside it


def test_the_ladder_stops_where_the_batch_stops_scaling_or_does_not_fit() -> None:
    flat = BatchTrials(cap=3.0)  # x8 gives 3x: less than half of 8, the GPU is already busy
    e = batch_explorer(flat)
    e.run(applies())
    assert e.rungs == []
    oom = BatchTrials(cap=1000.0, oom=32)
    e = batch_explorer(oom)
    e.run(applies())
    assert e.rungs == ["larger_batch@x32"] and e.config(("larger_batch@x32",)).final == "failed"
    assert e.comparison(e.config(("larger_batch",))).speedup == pytest.approx(8.0, rel=0.01)


def test_the_ladder_climbs_to_the_ceiling_itself() -> None:
    # x8, x32, x128 keep scaling: the next step (x512) is over LADDER_MAX_MULTIPLIER, so x256 is the last rung
    fake = BatchTrials(cap=1000.0)
    e = batch_explorer(fake)
    e.run(applies())
    assert e.rungs == ["larger_batch@x32", "larger_batch@x128", f"larger_batch@x{ex.LADDER_MAX_MULTIPLIER}"]
    assert e.comparison(e.config((f"larger_batch@x{ex.LADDER_MAX_MULTIPLIER}",))).speedup == pytest.approx(256, rel=0.01)


class SeqFirstTrials:
    """A sequence-first input (35 time steps, batch 20): samples are counted along axis 0 (time steps)
    by the trial, the batch grows axis 1. The lever's x8 multiplied a count of 35 (35 x 8 = 280: a 14x
    larger batch); the GPU saturates at `cap` x the baseline's samples/s."""

    def __init__(self, cap: float) -> None:
        self.cap = cap
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
        self.calls.append(names)
        batch = 20
        for n in names:
            batch = 20 * int(n.split("@x")[1]) if "@x" in n else (280 if n == "larger_batch" else batch)
        per_s = 2000.0 * min(batch / 20, self.cap) * (1.0 + 0.001 * (len(self.calls) % 3))  # along the batch
        return {"status": "ok", "step_time_ms": 1000.0 * batch / per_s, "samples_per_s": per_s * 35 / batch,
                "samples_shape": [35, batch], "wall_s": 1.0, "changes": []}  # fmt: skip


def test_the_ladder_judges_the_batch_by_the_shape_not_the_multiplier() -> None:
    # x8 made the batch 14x larger (20 -> 280) and gave 6x the samples/s: more than half of 8, less than
    # half of 14: the GPU stopped scaling, the ladder ends
    fake = SeqFirstTrials(cap=6.0)
    e = batch_explorer(fake)  # type: ignore[arg-type]
    e.run(applies())
    assert e.batch_axis() == 1
    assert e.comparison(e.config(("larger_batch",))).speedup == pytest.approx(6.0, rel=0.01)
    assert e.rungs == []
    # where it scales (cap 1000), the ladder climbs; the rungs' sizes come from the runner's count
    fake = SeqFirstTrials(cap=1000.0)
    e = batch_explorer(fake)  # type: ignore[arg-type]
    e.run(applies())
    assert e.rungs[:1] == ["larger_batch@x32"]


def test_a_batch_count_along_the_batch_axis() -> None:
    from gpuadvisor.verify.explore_run import _baseline_batch

    trials = [{"samples": 35 * 20, "steps_timed": 20, "samples_shape": [35, 20]} for _ in range(3)]
    assert _baseline_batch(trials) == 35  # axis 0: the time steps of a sequence-first input
    assert _baseline_batch(trials, 1) == 20  # the axis a batch lever grew
    assert _baseline_batch([{"samples": 10, "steps_timed": 1}], 1) is None  # no shape recorded


def test_an_untried_compile_lever_comes_before_levers_that_measured_no_gain_alone() -> None:
    # vit_manual_attention on an H200 (600 s): bf16 1.12x alone, channels_last and cudnn.benchmark
    # 1.01x; a whole round of those two on top of bf16 used the time in which bf16 + compile (1.69x on
    # one trial) would have had its verdict
    lvs = levers(("bf16_autocast", "channels_last", "cudnn_benchmark", "torch_compile"))
    fake = FakeTrials({"bf16_autocast": 0.9, "torch_compile": 0.6})
    e = explorer(lvs, fake)
    e.run(applies())
    assert [c["levers"] for c in e.steps[0]["candidates"]] == [["bf16_autocast", "torch_compile"]]
    assert e.steps[0]["chosen"] == ["bf16_autocast", "torch_compile"]
    # the levers that measured ~1.00x alone are still tried on top, last
    weak = [sorted(c["levers"]) for c in e.steps[-1]["candidates"]]
    assert sorted(weak) == [sorted(["bf16_autocast", "torch_compile", "channels_last"]),
                            sorted(["bf16_autocast", "torch_compile", "cudnn_benchmark"])]  # fmt: skip
    assert e.stopped == "no lever adds to the best configuration beyond noise"
