"""The framework that drives the loop, its settings and the user's call sites (environment.json
`framework`, `model_calls`). On the CPU with FAKE minimal `transformers` / `lightning` packages written
here (labelled as fakes: only the module layout, the class names and the attributes gpuadvisor reads
are real), and with the real packages when they are installed (skipped with the reason otherwise)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from capture_helpers import FAST, SCRIPTS, manifest, profile_cmd

# The quick tier (`-m "not slow"`) must run in under 2 minutes on 2 idle cores: slow because each test runs
# `gpuadvisor profile` on a script with a stub framework (seconds each).
pytestmark = pytest.mark.slow

FAKE_TRANSFORMERS = {
    "transformers/__init__.py": '''
        """FAKE transformers (gpuadvisor test fixture): lazy attributes like the real _LazyModule."""
        __version__ = "0.0.0-fake"

        def __getattr__(name):
            import importlib
            where = {"TrainingArguments": "training_args", "Trainer": "trainer"}.get(name)
            if where is None:
                raise AttributeError(name)
            return getattr(importlib.import_module(f"transformers.{where}"), name)
        ''',
    "transformers/training_args.py": '''
        """FAKE transformers.training_args (gpuadvisor test fixture)."""
        import enum
        from dataclasses import dataclass, field

        class OptimizerNames(str, enum.Enum):
            ADAMW_TORCH = "adamw_torch"
            ADAMW_TORCH_FUSED = "adamw_torch_fused"

        @dataclass
        class TrainingArguments:
            output_dir: str = "out"
            per_device_train_batch_size: int = 8
            per_device_eval_batch_size: int = 8
            gradient_accumulation_steps: int = 1
            bf16: bool = False
            fp16: bool = False
            tf32: bool = None
            dataloader_num_workers: int = 0
            dataloader_pin_memory: bool = True
            optim: str = "adamw_torch"
            torch_compile: bool = False
            max_steps: int = -1
            logging_steps: int = 500
            report_to: list = field(default_factory=list)
            save_strategy: str = "steps"
            use_cpu: bool = False

            def __post_init__(self):
                self.optim = OptimizerNames(self.optim)
        ''',
    "transformers/trainer.py": '''
        """FAKE transformers.trainer (gpuadvisor test fixture): a minimal training loop."""
        import torch

        class Trainer:
            def __init__(self, model=None, args=None, train_dataset=None):
                self.model, self.args, self.train_dataset = model, args, train_dataset

            def train(self):
                loader = torch.utils.data.DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size)
                opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
                step = 0
                while step < self.args.max_steps:
                    for batch in loader:
                        logits = self.model(batch["input_ids"])
                        loss = torch.nn.functional.cross_entropy(logits, batch["labels"])
                        loss.backward()
                        opt.step()
                        opt.zero_grad()
                        step += 1
                        if step >= self.args.max_steps:
                            break
        ''',
}

FAKE_LIGHTNING = {
    "lightning/__init__.py": '''
        """FAKE lightning (gpuadvisor test fixture)."""
        __version__ = "0.0.0-fake"
        from lightning.pytorch import LightningModule, Trainer
        ''',
    "lightning/pytorch/__init__.py": '''
        from lightning.pytorch.core.module import LightningModule
        from lightning.pytorch.trainer.trainer import Trainer
        ''',
    "lightning/pytorch/core/__init__.py": "",
    "lightning/pytorch/core/module.py": '''
        """FAKE lightning.pytorch.core.module (gpuadvisor test fixture)."""
        import torch

        class LightningModule(torch.nn.Module):
            pass
        ''',
    "lightning/pytorch/trainer/__init__.py": "",
    "lightning/pytorch/trainer/trainer.py": '''
        """FAKE lightning.pytorch.trainer.trainer (gpuadvisor test fixture)."""

        class Trainer:
            def __init__(self, *, max_steps=-1, accelerator="auto", precision=None, accumulate_grad_batches=1,
                         logger=None, enable_checkpointing=True, enable_progress_bar=True, enable_model_summary=True):
                self.max_steps = max_steps
                self.max_epochs = None
                self._precision = precision or "32-true"
                self.accumulate_grad_batches = accumulate_grad_batches
                self.num_devices = 1

            @property
            def precision(self):
                return self._precision

            def fit(self, model, loader):
                opt = model.configure_optimizers()
                step = 0
                while step < self.max_steps:
                    for i, batch in enumerate(loader):
                        loss = model.training_step(batch, i)
                        loss.backward()
                        opt.step()
                        opt.zero_grad()
                        step += 1
                        if step >= self.max_steps:
                            break
        ''',
}


def _write_fakes(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def _profile(tmp: Path, script: str, pythonpath: Path | None) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    r = subprocess.run(
        profile_cmd("-q", "-o", str(out), *FAST, str(SCRIPTS / script)),
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return r, out


def _env(run: Path) -> dict[str, Any]:
    return json.loads((run / "environment.json").read_text())


def test_fake_hf_trainer_settings_and_call_sites(tmp_path: Path) -> None:
    fakes = _write_fakes(tmp_path / "fakes", FAKE_TRANSFORMERS)
    r, out = _profile(tmp_path, "hf_train.py", fakes)
    assert r.returncode == 0, r.stderr
    fw = _env(out)["framework"]
    assert fw["name"] == "hf_trainer" and fw["version"] == "0.0.0-fake"
    s = fw["settings"]
    assert (s["bf16"], s["fp16"], s["tf32"], s["torch_compile"]) == (False, False, None, False)
    assert (s["per_device_train_batch_size"], s["gradient_accumulation_steps"]) == (4, 1)
    assert (s["dataloader_num_workers"], s["dataloader_pin_memory"]) == (0, True)
    assert s["optim"] == "adamw_torch"  # the enum is written by value
    script = Path(SCRIPTS / "hf_train.py").read_text().splitlines()
    args_line = next(i for i, ln in enumerate(script, 1) if ln.startswith("args = TrainingArguments("))
    trainer_line = next(i for i, ln in enumerate(script, 1) if ln.startswith("trainer = Trainer("))
    assert fw["call_site"]["line"] == args_line and fw["call_site"]["file"].endswith("hf_train.py")
    assert fw["call_site"]["code"] == "args = TrainingArguments("
    assert fw["call_sites"]["Trainer"]["line"] == trainer_line
    # The model is called inside the framework: the user's line is the one that started training.
    top = _env(out)["model_calls"][0]
    assert top["code"] == "trainer.train()" and top["calls_per_step"] == 1.0
    m = manifest(out)
    assert m["step_detection"] == "optimizer_step_hook" and m["capture"]["state"] == "complete"


def test_fake_lightning_trainer(tmp_path: Path) -> None:
    fakes = _write_fakes(tmp_path / "fakes", FAKE_LIGHTNING)
    r, out = _profile(tmp_path, "lightning_train.py", fakes)
    assert r.returncode == 0, r.stderr
    env = _env(out)
    fw = env["framework"]
    assert fw["name"] == "lightning" and fw["version"] == "0.0.0-fake"
    assert fw["settings"]["precision"] == "32-true" and fw["settings"]["accumulate_grad_batches"] == 1
    assert fw["call_site"]["code"] == "trainer = L.Trainer("
    top = env["model_calls"][0]
    assert top["module_class"] == "LitAutoEncoder" and top["code"] == "x_hat = self(x)"
    assert env["settings"]["run_mode"]["kind"] == "training"


def test_frameworks_are_never_imported_by_gpuadvisor(tmp_path: Path) -> None:
    """A plain script: the watched modules stay unimported (and the framework is `plain`)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys, torch\n"
        "m = torch.nn.Linear(2, 2)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(8):\n"
        "    m(torch.ones(1, 2)).sum().backward(); opt.step()\n"
        "print(sorted(n for n in ('transformers', 'lightning', 'accelerate', 'pytorch_lightning') if n in sys.modules))\n"
    )
    out = tmp_path / "run"
    r = subprocess.run(
        profile_cmd("-q", "--full", "-o", str(out), *FAST, str(probe)),
        capture_output=True, text=True, timeout=300, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("[]")
    assert _env(out)["framework"]["name"] == "plain"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_real_hf_trainer(tmp_path: Path) -> None:
    r, out = _profile(tmp_path, "hf_train.py", None)
    assert r.returncode == 0, r.stderr
    env = _env(out)
    fw = env["framework"]
    import transformers

    assert fw["name"] == "hf_trainer" and fw["version"] == transformers.__version__
    s = fw["settings"]
    assert s["bf16"] is False and s["per_device_train_batch_size"] == 4
    assert s["gradient_accumulation_steps"] == 1 and isinstance(s["optim"], str)
    assert fw["call_site"]["code"] == "args = TrainingArguments("
    assert fw["call_sites"]["Trainer"]["code"].startswith("trainer = Trainer(")
    assert env["model_calls"][0]["code"] == "trainer.train()"
    assert manifest(out)["step_detection"] == "optimizer_step_hook"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="lightning is not installed")
def test_real_lightning_trainer(tmp_path: Path) -> None:
    r, out = _profile(tmp_path, "lightning_train.py", None)
    assert r.returncode == 0, r.stderr
    env = _env(out)
    fw = env["framework"]
    import lightning

    assert fw["name"] == "lightning" and fw["version"] == lightning.__version__
    assert fw["settings"]["precision"] == "32-true" and fw["settings"]["accumulate_grad_batches"] == 1
    assert fw["call_site"]["code"] == "trainer = L.Trainer("
    top = env["model_calls"][0]
    assert top["module_class"] == "LitAutoEncoder" and top["code"] == "x_hat = self(x)"
    assert manifest(out)["step_detection"] == "optimizer_step_hook"


def test_sys_path_zero_is_the_script_dir_before_the_session_imports(tmp_path: Path) -> None:
    """coverage.py's PyRunner order: a module next to the script shadows one of the same name for
    everything imported afterwards, the session's imports included, as under plain python."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "helper_mod.py").write_text("VALUE = 'from the script dir'\n")
    script = tmp_path / "app" / "main.py"
    script.write_text("import sys, helper_mod\nprint(helper_mod.VALUE, sys.path[0])\n")
    out = tmp_path / "run"
    r = subprocess.run(
        profile_cmd("-q", "--no-analyze", "-o", str(out), str(script)),
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    plain = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.stdout == plain.stdout
    # The session (which imports torch) started with the script's directory already first on sys.path.
    assert f"session started; sys.path[0] = {tmp_path / 'app'}\n" in (out / "gpuadvisor.log").read_text()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="accelerate is not installed")
def test_real_accelerate(tmp_path: Path) -> None:
    r, out = _profile(tmp_path, "accelerate_train.py", None)
    assert r.returncode == 0, r.stderr
    env = _env(out)
    fw = env["framework"]
    import accelerate

    assert fw["name"] == "hf_accelerate" and fw["version"] == accelerate.__version__
    assert fw["settings"]["gradient_accumulation_steps"] == 1 and fw["settings"]["mixed_precision"] == "no"
    assert fw["call_site"]["code"] == "accelerator = Accelerator(cpu=True, gradient_accumulation_steps=1)"
    assert env["model_calls"][0]["code"] == "loss = model(torch.randn(8, 16)).pow(2).mean()"
    assert env["settings"]["run_mode"]["backward_calls"] >= 6
