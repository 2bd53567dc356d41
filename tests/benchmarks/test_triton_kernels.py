"""GPU test (`pytest -m gpu` on the GPU machine): the corpus's hand-written Triton kernels compute what
their torch fallbacks compute, on the planted tiny grid and on the fixed one-program-per-row grid."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.gpu
WORKLOADS = Path(__file__).resolve().parents[2] / "benchmarks" / "workloads"


def load(name: str) -> ModuleType:
    sys.path.insert(0, str(WORKLOADS))
    spec = importlib.util.spec_from_file_location(f"corpus_{name}", WORKLOADS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cuda() -> object:
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch


@pytest.mark.parametrize("fixed_grid", [False, True])
def test_triton_cross_entropy_matches_torch(cuda: object, fixed_grid: bool) -> None:
    import torch
    import torch.nn.functional as F

    mod = load("triton_loss")
    logits = torch.randn(1000, 5003, device="cuda", dtype=torch.bfloat16)  # rows not a multiple of 2 programs
    labels = torch.randint(0, 5003, (1000,), device="cuda")
    losses, grad = mod.cross_entropy_fwd_bwd(logits, labels, fixed_grid)
    x = logits.float().requires_grad_()
    F.cross_entropy(x, labels).backward()
    torch.testing.assert_close(losses, F.cross_entropy(logits.float(), labels, reduction="none"), atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(grad.float(), x.grad, atol=1e-5, rtol=2e-2)


@pytest.mark.parametrize("fixed", [False, True])
def test_triton_rmsnorm_matches_torch(cuda: object, fixed: bool) -> None:
    import torch

    mod = load("low_occupancy")
    x = torch.randn(777, 1024, device="cuda")
    w = torch.randn(1024, device="cuda")
    y, rstd = mod.rmsnorm_forward(x, w, 1e-6, fixed)
    ref_rstd = torch.rsqrt(x.pow(2).mean(dim=1) + 1e-6)
    torch.testing.assert_close(rstd, ref_rstd)
    torch.testing.assert_close(y, x * ref_rstd[:, None] * w)
