"""`verify --explore` on real scripts on the CPU (issue 40): the script's own switches found and used
(short options `-b`/`-j`; an HfArgumentParser script), and the guided search measuring the remedy
pair the findings price together as one configuration. Real `profile` runs of synthetic fixtures
(tests/verify/scripts: sleeps stand in for decoding and for the device's share of a step), real trial
processes; trial counts and steps kept small."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from verify_helpers import LOADER, SCRIPTS, gpuadvisor, profile

SHORT = ["--trials", "2", "--warmup-steps", "3", "--steps", "10", "--num-workers", "2"]


def explore(run: Path, *args: str) -> tuple[str, dict[str, Any]]:
    r = gpuadvisor("verify", str(run), "--explore", *SHORT, *args)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads((run / "verify.json").read_text())
    return r.stderr, doc


@pytest.mark.slow  # a profile and about 8 trial processes (about 90 s on 2 shared cores)
def test_a_scripts_short_options_are_found_and_used(tmp_path: Path) -> None:
    run = profile(tmp_path / "run", SCRIPTS / "short_flags.py", "--steps", "400")
    stderr, doc = explore(run, "--only", "num_workers", "--only", "script_batch_size", "--only", "larger_batch")
    assert "the script's own switches: num_workers -> -j 2 (ArgumentParser, seen at run time); " in stderr
    switches = {s["lever"]: s for s in doc["explore"]["switches"]}
    assert switches["num_workers"]["args"] == ["-j", "2"] and switches["script_batch_size"]["option"] == "-b"
    by = {t["lever"]: t for t in doc["trials"]}
    workers = by["num_workers"]
    # used: the trial passed -j 2 (and its parser gave j=2, or the trial would have failed)
    assert workers["status"] == "ok" and workers["change"] == "the script's own -j 2 added to the command"
    assert workers["switch"]["parsed_value"] == 0  # the baseline's; the lever's trials parsed 2 (checked)
    # -b is the DataLoader's batch_size: raised through the script's own option, not the DataLoader
    assert "the script's own -b sets the DataLoader's batch_size (4)" in by["larger_batch"]["reason"]
    batch = by["script_batch_size"]
    assert batch["status"] == "ok" and batch["change"] == "the script's own -b argument set to 16 (4 x 4)"
    best = doc["explore"]["best"]
    assert best is None or "script -j 2" in best["labels"]  # how much it gains on a shared CPU varies


@pytest.mark.slow  # a profile and about 8 trial processes (about 2 min on 2 shared cores)
def test_an_hfargumentparser_scripts_switches_are_found_and_used(tmp_path: Path) -> None:
    run = profile(tmp_path / "run", SCRIPTS / "hf_args.py", "--steps", "400")
    stderr, doc = explore(run, "--only", "num_workers", "--only", "bf16_autocast")
    switches = {s["lever"]: s for s in doc["explore"]["switches"]}
    # the real transformers.HfArgumentParser where it is installed, else the stand-in (same options)
    assert switches["bf16_autocast"]["parser"] == "HfArgumentParser"
    assert switches["bf16_autocast"]["args"] == ["--bf16"]
    assert switches["num_workers"]["args"] == ["--dataloader_num_workers", "2"]
    assert doc["explore"]["script_flags"] == ["--bf16", "--dataloader_num_workers"]
    by = {t["lever"]: t for t in doc["trials"]}
    assert by["bf16_autocast"]["status"] == "ok" and by["bf16_autocast"]["change"] == "the script's own --bf16 added to the command"
    assert by["num_workers"]["status"] == "ok" and "--dataloader_num_workers 2" in by["num_workers"]["change"]
    assert "bf16_autocast -> --bf16 (HfArgumentParser, seen at run time)" in stderr


@pytest.mark.slow  # a profile and about 10 trial processes (about 2 min on 2 shared cores)
def test_the_guided_search_measures_a_predicted_pair_as_one_configuration(tmp_path: Path) -> None:
    run = profile(tmp_path / "run", LOADER, "--model", "conv", "--step-ms", "20", "--steps", "400")
    # the predictions are of the recorded step in milliseconds: a slow recording (a shared CPU is slow
    # and uneven: the pair's price must not hang on how fast this one runs today)
    step_ms = 1000.0

    def finding(rule: str, remedy: str, speedup: float) -> dict[str, Any]:
        # what a GPU run of a conv net carries (synthetic: GA1102/GA1103 do not fire on the CPU)
        return {"rule": rule, "remedy": remedy, "impact": 1 - 1 / speedup, "severity": "high",
                "prediction": {"basis": "replay", "speedup": speedup, "baseline_step_ms": step_ms,
                               "predicted_step_ms": step_ms / speedup, "remedies": [{"remedy": remedy, "params": {}}],
                               "group": "kernel_efficiency", "group_remedies": ["channels_last", "bf16_autocast"],
                               "group_speedup": 1.76}}  # fmt: skip

    findings = [finding("GA1102", "channels_last", 1.4), finding("GA1103", "bf16_autocast", 1.17)]
    (run / "findings.json").write_text(json.dumps({"schema_version": 1, "findings": findings}))
    r = gpuadvisor("verify", str(run), "--explore", *SHORT)
    assert r.returncode == 0, r.stderr
    doc = json.loads((run / "verify.json").read_text())
    assert doc["explore"]["mode"] == "guided"
    pair = ["channels_last", "bf16_autocast"]
    assert doc["explore"]["sets"][0] == {"levers": pair, "predicted_speedup": 1.76, "changes_batch": False,
                                         "source": "GA1102 + GA1103 (kernel efficiency: one problem)"}  # fmt: skip
    first = doc["explore"]["steps"][0]
    assert first["from"] == [] and [c["levers"] for c in first["candidates"]] == [pair]
    assert "round 1: on baseline (" in r.stderr and "channels_last+bf16_autocast (up to " in r.stderr
    # the pair was one trial process each time (one configuration, both changes in it)
    assert first["candidates"][0]["trials"] == 2 and first["candidates"][0]["status"] == "ok"
    # the budget came from the first baseline trial, said before the search
    assert doc["settings"]["budget_from"] == "the first baseline trial's length"
    assert r.stderr.index("the first baseline trial took") < r.stderr.index("round 1: on baseline")
    # every measurement says its mean, median and start-up
    base = doc["baseline"]
    assert base["median_step_ms"] and base["startup_s"] and len(base["per_trial"]) == base["trials"]
    assert doc["explore"]["stopped"]
