"""Planted problem: kernel_efficiency (`pad_gemm_shapes`). bf16 GEMMs whose dimensions defeat tensor cores.

A GPT-style LM (8 layers, SDPA attention, bf16 autocast, fused AdamW, data on the GPU) whose sizes were
picked without thinking of the hardware: an MLP hidden width of 3999, GPT-2's vocabulary
of 50257, 8k tokens per step. In bf16, cuBLAS needs the inner dimensions to be multiples of 8 (16 bytes)
for its fastest tensor-core kernels; odd sizes fall back to slower kernels or padded copies, and the
50257-wide LM head (the largest GEMM) is the worst of them. (d_model is 1024 with 8 heads of 128, so the
attention itself is not affected: only the MLP width and the vocabulary are odd.)

--fix pad_gemm_shapes: MLP hidden 4096, vocabulary padded to 50304 (a multiple of 64, as nanoGPT does; the
extra logits are never targets). Slightly more FLOPs, faster kernels.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from _models import GPT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["pad_gemm_shapes"], steps=60)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    torch.backends.cuda.matmul.allow_tf32 = True
    batch = args.batch_size or (2 if args.tiny else 16)
    vocab, seq, n_layers, n_heads = (129, 16, 2, 4) if args.tiny else (50257, 512, 8, 8)
    d_model = 32 if args.tiny else 1024
    padded_vocab = (vocab + 63) // 64 * 64 if "pad_gemm_shapes" in fixes else vocab

    model = GPT(padded_vocab, seq, d_model, n_layers, n_heads, attention="sdpa")
    if "pad_gemm_shapes" not in fixes and not args.tiny:
        for block in model.blocks:  # the odd MLP width of the planted sizes (4 x 1024 becomes 3999)
            block.mlp[0] = torch.nn.Linear(d_model, 3999)
            block.mlp[2] = torch.nn.Linear(3999, d_model)
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device.type == "cuda")
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("gemm_odd_shapes", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        chunk = data[step % n_batches]
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, padded_vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
