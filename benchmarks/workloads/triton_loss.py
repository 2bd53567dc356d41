"""Planted problem: low_occupancy (fix `fix_kernel_grid`). A transformer LM with a custom Triton loss.

A causal transformer LM (nn.TransformerEncoder, 4 pre-norm layers, d_model 512, 8 heads, seq 256,
batch 16, vocab 32,000, tied embeddings; bf16 autocast, TF32, fused AdamW, tokens on the GPU) whose
loss is a hand-written fused cross-entropy kernel in Triton: one pass computes each row's log-sum-exp
(online max/sum over the vocabulary in 4,096-wide blocks), a second pass writes the gradient of the
logits ((softmax - one-hot) / rows) so backward is a multiply. It is launched on a fixed grid of 2
programs, each looping over half of the 4,096 rows.

Why it is slow on an H200: the kernel streams ~0.8 GB per step (the bf16 logits twice, their gradient
once) but 2 programs occupy 2 of 132 SMs; each SM pulls only tens of GB/s, so the loss alone takes
~10 ms while the rest of the step (a ~0.7 TFLOP bf16 model) takes ~2-3 ms. The GPU is busy all the time,
so a larger batch is not the fix: the kernel's time grows with the rows exactly as the model's does
(measured as the probe `batch_x4`).

--fix fix_kernel_grid: the same kernel launched with one program per row (grid = rows = 4,096), which
spreads the stream over every SM (~0.3 ms at HBM bandwidth).

Without Triton or CUDA (the `--tiny` CPU smoke test) an equivalent torch implementation is used.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.nn as nn
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only machines: the torch fallback below is used instead
    triton = None

PLANTED_PROGRAMS = 2
BLOCK = 4096

if triton is not None:

    @triton.jit
    def _cross_entropy_fwd_bwd(
        logits_ptr, labels_ptr, loss_ptr, grad_ptr, n_rows, n_cols, inv_rows,
        ROWS_PER_PROG: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    ):
        pid = tl.program_id(0)
        for r in range(0, ROWS_PER_PROG):
            row = pid * ROWS_PER_PROG + r
            valid = row < n_rows
            base = logits_ptr + row.to(tl.int64) * n_cols
            label = tl.load(labels_ptr + row, mask=valid, other=0)
            # pass 1: online maximum and sum of exponentials over the vocabulary
            m = float("-inf")
            d = 0.0
            for start in range(0, n_cols, BLOCK_SIZE):
                cols = start + tl.arange(0, BLOCK_SIZE)
                x = tl.load(base + cols, mask=(cols < n_cols) & valid, other=float("-inf")).to(tl.float32)
                m_new = tl.maximum(m, tl.max(x, axis=0))
                d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
                m = m_new
            lse = m + tl.log(d)
            x_label = tl.load(base + label, mask=valid, other=0.0).to(tl.float32)
            tl.store(loss_ptr + row, lse - x_label, mask=valid)
            # pass 2: d(mean loss)/d(logits) = (softmax - one_hot) / rows
            gbase = grad_ptr + row.to(tl.int64) * n_cols
            for start in range(0, n_cols, BLOCK_SIZE):
                cols = start + tl.arange(0, BLOCK_SIZE)
                mask = (cols < n_cols) & valid
                x = tl.load(base + cols, mask=mask, other=0.0).to(tl.float32)
                p = tl.exp(x - lse)
                g = tl.where(cols == label, p - 1.0, p) * inv_rows
                tl.store(gbase + cols, g.to(grad_ptr.dtype.element_ty), mask=mask)


def cross_entropy_fwd_bwd(logits: torch.Tensor, labels: torch.Tensor, fixed_grid: bool
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row losses and the gradient of their mean with respect to the logits."""
    n_rows, n_cols = logits.shape
    if triton is None or not logits.is_cuda:
        logp = logits.float().log_softmax(dim=1)
        losses = -logp.gather(1, labels[:, None]).squeeze(1)
        grad = logp.exp()
        grad[torch.arange(n_rows), labels] -= 1.0
        return losses, (grad / n_rows).to(logits.dtype)
    losses = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
    grad = torch.empty_like(logits)
    programs = n_rows if fixed_grid else PLANTED_PROGRAMS
    _cross_entropy_fwd_bwd[(programs,)](
        logits, labels, losses, grad, n_rows, n_cols, 1.0 / n_rows,
        ROWS_PER_PROG=triton.cdiv(n_rows, programs), BLOCK_SIZE=BLOCK, num_warps=8,
    )
    return losses, grad


class FusedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, labels: torch.Tensor, fixed_grid: bool) -> torch.Tensor:
        losses, grad = cross_entropy_fwd_bwd(logits.contiguous(), labels.contiguous(), fixed_grid)
        ctx.save_for_backward(grad)
        return losses.mean()

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (grad,) = ctx.saved_tensors
        return grad * grad_out.to(grad.dtype), None, None


class CausalLM(nn.Module):
    def __init__(self, vocab: int, seq: int, d_model: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(1, seq, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.tok.weight
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.tok(idx) + self.pos[:, : idx.shape[1]]
        h = self.encoder(h, mask=self.causal, is_causal=True)
        return self.lm_head(self.norm(h))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["fix_kernel_grid"], steps=600)
    args = parser.parse_args()
    fixed_grid = "fix_kernel_grid" in chosen_fixes(args)

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 16)
    vocab, seq, d_model, layers, heads = (256, 16, 32, 2, 4) if args.tiny else (32000, 256, 512, 4, 8)

    model = CausalLM(vocab, seq, d_model, layers, heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device.type == "cuda")
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("triton_loss", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        chunk = data[step % n_batches]
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(x)
        loss = FusedCrossEntropy.apply(logits.reshape(-1, vocab), y.reshape(-1), fixed_grid)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
