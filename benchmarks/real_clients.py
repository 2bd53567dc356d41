"""Real training scripts, as their projects ship them, under `gpuadvisor profile` on a GPU (issue 38).

    python benchmarks/real_clients.py OUT --nanogpt DIR --timm DIR --imagenet MAIN_PY [--frameworks] [--only NAME ...]

DIR/MAIN_PY are copies of the projects' files fetched by you (never committed here): karpathy/nanoGPT
(train.py, model.py, configurator.py, config/), huggingface/pytorch-image-models (train.py and the
timm package), pytorch/examples (imagenet/main.py). Data is made on the machine: random GPT-2 tokens
for nanoGPT's train.bin/val.bin, a folder of generated JPEGs for timm, `--dummy` for imagenet.
`--frameworks` adds this repo's Hugging Face Trainer and Lightning workloads (benchmarks/workloads).

For each client it prints the step detection, the window placement, the run's step distribution
(mean, median, stalls), the start-up and the top findings, and writes OUT/NAME/summary.json (no
source snippets of the third-party code) beside the run directory. For timm it also runs the script
plainly with -j 4, 8 and 12 and compares the measured mean step with the prediction for more workers
made from the -j 4 profile. Run it after every change to capture or step modeling; its output goes in
docs/real-clients.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

PY = sys.executable


def sh(cmd: list[str], cwd: Path, log: Path, timeout: float, env: dict[str, str] | None = None) -> int:
    """Run `cmd` in `cwd`, output into `log`; the exit status (124 on timeout)."""
    t0 = time.time()
    with open(log, "w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        try:
            rc = subprocess.run(
                cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, env=env
            ).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    print(f"  [{time.time() - t0:.0f} s, rc {rc}] {' '.join(cmd)[:160]}", flush=True)
    return rc


def profile(run: Path, target: list[str], cwd: Path, timeout: float, extra: tuple[str, ...] = ()) -> int:
    if run.exists():
        shutil.rmtree(run)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    )
    return sh(
        [PY, "-m", "gpuadvisor", "profile", "-q", "--no-analyze", "-o", str(run), *extra, *target],
        cwd,
        run.with_suffix(".log"),
        timeout,
        env,
    )


def summary(run: Path) -> dict[str, Any]:
    """What the issue asks to see of one run, without source snippets."""
    import gpuadvisor

    m = json.loads((run / "manifest.json").read_text())
    cap = m.get("capture") or {}
    out: dict[str, Any] = {
        "exit_reason": m.get("exit_reason"),
        "step_detection": m.get("step_detection"),
        "steps_seen": m.get("steps_seen"),
        "window": [cap.get("first_recorded_step"), cap.get("last_recorded_step")],
        "settled_at_step": cap.get("settled_at_step"),
        "settle_capped": cap.get("settle_capped"),
        "provisional": cap.get("provisional", False),
        "compile_seconds": cap.get("compile_seconds"),
        "messages": m.get("messages"),
    }
    try:
        r = gpuadvisor.analyze(run)
    except Exception as err:  # the summary says so; the run directory is kept for a look
        out["analysis_error"] = f"{type(err).__name__}: {err}"
        return out
    mt = r.metrics
    keys = (
        "run_mean_step_ms", "run_median_step_ms", "step_time_ms", "unprofiled_step_time_ms", "run_stall_steps",
        "run_stall_steps_timed", "run_stall_period", "run_stall_excess_ms", "run_stall_cause", "startup_seconds",
        "step_times_disagree",
    )  # fmt: skip
    out["metrics"] = {k: mt.get(k) for k in keys}
    timing = r.environment.get("run_timing") or {}
    out["startup"] = timing.get("startup")
    out["costs"] = [
        {k: c.get(k) for k in ("cause", "count", "each_ms", "share", "period_steps")}
        for c in timing.get("costs") or []
    ]
    out["notes"] = [
        n
        for n in r.notes
        if n.startswith(("run kind", "trace kind", "stalls", "start-up", "costs", "step times"))
    ]
    out["findings"] = [
        {"rule": f.rule, "severity": f.severity.value, "impact": f.impact, "title": f.title}
        for f in r.findings[:6]
    ]
    return out


def show(name: str, s: dict[str, Any]) -> None:
    mt = s.get("metrics") or {}
    print(
        f"\n=== {name}: exit {s.get('exit_reason')}, steps by {s.get('step_detection')} ({s.get('steps_seen')} seen)"
    )
    print(
        f"  window steps {s['window'][0]}-{s['window'][1]}, settled at {s.get('settled_at_step')}"
        f"{' (cap)' if s.get('settle_capped') else ''}{', PROVISIONAL' if s.get('provisional') else ''}; "
        f"compile {s.get('compile_seconds')} s"
    )
    if "analysis_error" in s:
        print("  analysis error:", s["analysis_error"])
        return
    print(
        f"  mean {mt.get('run_mean_step_ms')} ms, median {mt.get('run_median_step_ms')} ms, profiled "
        f"{mt.get('step_time_ms')} ms; stalls {mt.get('run_stall_steps')}/{mt.get('run_stall_steps_timed')} every "
        f"{mt.get('run_stall_period')} (+{mt.get('run_stall_excess_ms')} ms, {mt.get('run_stall_cause')}); start-up "
        f"{mt.get('startup_seconds')} s {((s.get('startup') or {}).get('parts'))}"
    )
    for c in s.get("costs") or []:
        print(f"  cost {c}")
    for n in s.get("notes") or []:
        print("  note:", n[:300])
    for f in s.get("findings") or []:
        print(f"  {f['severity']:>6} {100 * (f['impact'] or 0):5.1f}% {f['rule']} {f['title'][:150]}")


def profile_each(out: Path, runs: dict[str, list[str]], cwd: Path, timeout: float, only: set[str]) -> None:
    """Profile each of `runs` (name -> target) from `cwd`, write OUT/NAME/summary.json and print it."""
    for name, target in runs.items():
        if only and name not in only:
            continue
        run = out / name
        profile(run, target, cwd, timeout)
        s = summary(run)
        (run / "summary.json").write_text(json.dumps(s, indent=1, default=str))
        show(name, s)


def _tokens(path: Path, n: int, vocab: int, seed: int) -> None:
    import numpy as np

    np.random.default_rng(seed).integers(0, vocab, n, dtype=np.uint16).tofile(path)


def nanogpt(out: Path, src: Path, only: set[str]) -> None:
    work = out / "nanogpt"
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(src, work)
    for ds, vocab in (("openwebtext", 50257), ("shakespeare_char", 65)):
        d = work / "data" / ds
        d.mkdir(parents=True, exist_ok=True)
        _tokens(d / "train.bin", 5_000_000, vocab, 1)
        _tokens(d / "val.bin", 500_000, vocab, 2)
    chars = [chr(32 + i) for i in range(65)]
    with open(work / "data" / "shakespeare_char" / "meta.pkl", "wb") as fh:
        pickle.dump(
            {"vocab_size": 65, "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}},
            fh,
        )
    gpt2 = ["--eval_interval=50", "--eval_iters=20", "--gradient_accumulation_steps=4", "--batch_size=12"]
    runs = {
        "nanogpt_gpt2_compile": ["train.py", "--compile=True", *gpt2],
        "nanogpt_gpt2_eager": ["train.py", "--compile=False", *gpt2],
        "nanogpt_char_compile": ["train.py", "config/train_shakespeare_char.py", "--compile=True"],
    }
    profile_each(out, runs, work, 400, only)


def _jpegs(args: tuple[Path, int, int]) -> None:
    import numpy as np
    from PIL import Image

    folder, start, count = args
    rng = np.random.default_rng(start)
    for i in range(start, start + count):
        # ImageNet-like size; smooth noise so that the JPEG decodes like a photo, not like static
        small = rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize((500, 375), Image.BILINEAR)
        img.save(folder / f"{i:06d}.jpg", quality=90)


def make_image_folder(root: Path, classes: int, per_class: int) -> None:
    jobs = []
    for c in range(classes):
        d = root / f"c{c:03d}"
        d.mkdir(parents=True, exist_ok=True)
        for k in range(0, per_class, 100):
            jobs.append((d, c * per_class + k, min(100, per_class - k)))
    with ProcessPoolExecutor(os.cpu_count() or 4) as ex:
        list(ex.map(_jpegs, jobs))


_TIMM_TIME = re.compile(r"\[\s*(\d+)/\d+.*?Time:\s*[\d.]+s,.*?\(\s*([\d.]+)s,")


def timm_mean_step(log: Path, skip: int = 20) -> float | None:
    """The mean step (ms) over the batches after `skip` from timm's own log lines: its "Time" column
    holds the running average since the epoch began, so two of them give the mean between them."""
    pts = [(int(a), float(b)) for a, b in _TIMM_TIME.findall(log.read_text(errors="replace"))]
    pts = [(n + 1, avg) for n, avg in pts]
    early = [p for p in pts if p[0] <= skip]
    if not pts or not early or pts[-1][0] <= early[-1][0]:
        return None
    (m, am), (n, an) = early[-1], pts[-1]
    return 1e3 * (n * an - m * am) / (n - m)


def timm(out: Path, src: Path, only: set[str]) -> None:
    data = out / "timm_data"
    if not data.exists():
        t0 = time.time()
        make_image_folder(data / "train", 20, 500)
        make_image_folder(data / "validation", 2, 100)
        print(f"  JPEG folder made in {time.time() - t0:.0f} s", flush=True)
    base = ["train.py", "--data-dir", str(data), "--model", "resnet50", "-b", "128", "--epochs", "1",
            "--log-interval", "10", "--output", str(out / "timm_output")]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]))
    if not only or "timm_profile" in only:
        run = out / "timm_j4"
        if run.exists():
            shutil.rmtree(run)
        gp = [PY, "-m", "gpuadvisor", "profile", "-q", "--no-analyze", "-o", str(run)]
        repo = str(Path(__file__).resolve().parents[1])
        sh(
            [*gp, *base, "-j", "4"],
            src,
            out / "timm_j4.log",
            400,
            dict(env, PYTHONPATH=repo + os.pathsep + env["PYTHONPATH"]),
        )
        s = summary(run)
        preds = {}
        try:
            import gpuadvisor
            from gpuadvisor.remedies import RemedyId
            from gpuadvisor.stepmodel.predict import predict

            r = gpuadvisor.analyze(run)
            model = r.metrics_detail.model if r.metrics_detail is not None else None
            if model is not None:
                for w in (8, 12):
                    p = predict(model, RemedyId.DATALOADER_WORKERS, workers=w, current_workers=4)
                    preds[w] = {"recovered": p.recovered_fraction, "speedup": p.speedup,
                                "predicted_step_ms": p.predicted_step_ms, "baseline_step_ms": p.baseline_step_ms}  # fmt: skip
        except Exception as err:
            preds["error"] = repr(err)
        s["workers_predicted"] = preds
        (run / "summary.json").write_text(json.dumps(s, indent=1, default=str))
        show("timm -j 4", s)
        print("  predicted for more workers:", json.dumps(preds, default=str))
    if not only or "timm_plain" in only:
        measured = {}
        for w in (4, 8, 12):
            log = out / f"timm_plain_j{w}.log"
            sh([PY, *base, "-j", str(w)], src, log, 300, env)
            measured[w] = timm_mean_step(log)
        print("  measured mean step (timm's own log, batches 21-end):", measured)
        if measured.get(4):
            gains = {w: 1 - v / measured[4] for w, v in measured.items() if v}
            print("  measured saving vs -j 4:", {w: round(g, 3) for w, g in gains.items()})
        (out / "timm_measured.json").write_text(json.dumps(measured))


def imagenet(out: Path, main_py: Path, only: set[str]) -> None:
    run = out / "imagenet_dummy"
    profile(
        run,
        [str(main_py), "-a", "resnet50", "--dummy", "-b", "128", "--epochs", "1", "-j", "8"],
        main_py.parent,
        300,
    )
    s = summary(run)
    (run / "summary.json").write_text(json.dumps(s, indent=1, default=str))
    show("imagenet --dummy", s)


def frameworks(out: Path, only: set[str]) -> None:
    """The Hugging Face Trainer and Lightning workloads of this repo (benchmarks/workloads), each written
    the way its framework's README shows (Trainer.train(), L.Trainer().fit()), at their planted defaults."""
    here = Path(__file__).resolve().parent / "workloads"
    runs = {
        "hf_trainer_fp32": [str(here / "hf_trainer_fp32.py")],
        "lightning_autoencoder": [str(here / "lightning_autoencoder.py")],
    }
    profile_each(out, runs, here, 300, only)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--nanogpt", type=Path)
    ap.add_argument("--timm", type=Path)
    ap.add_argument("--imagenet", type=Path)
    ap.add_argument("--frameworks", action="store_true", help="also the HF Trainer and Lightning workloads")
    ap.add_argument("--only", action="append", default=[])
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    only = set(a.only)
    steps: list[tuple[str, Callable[[], None]]] = []
    if a.nanogpt:
        steps.append(("nanogpt", lambda: nanogpt(a.out, a.nanogpt.resolve(), only)))
    if a.timm:
        steps.append(("timm", lambda: timm(a.out, a.timm.resolve(), only)))
    if a.imagenet:
        steps.append(("imagenet", lambda: imagenet(a.out, a.imagenet.resolve(), only)))
    if a.frameworks:
        steps.append(("frameworks", lambda: frameworks(a.out, only)))
    for name, fn in steps:
        print(f"== {name}", flush=True)
        fn()


if __name__ == "__main__":
    main()
