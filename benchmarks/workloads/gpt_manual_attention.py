"""Planted problem: kernel_efficiency (`sdpa`). A bf16 GPT whose causal attention is written by hand.

A GPT-2-small-sized decoder (12 layers, d_model 768, 12 heads, vocab 32k) at sequence 1024, batch 16,
already tuned elsewhere: bf16 autocast, TF32, fused AdamW, data on the GPU, no host syncs. Its attention
is the textbook version (q @ k^T, scale, masked_fill, softmax in float32, @ v): every layer materializes
[16, 12, 1024, 1024] score and probability tensors (in bf16 and float32) in the forward and again in the
backward, so memory-bound softmax/mask/cast kernels over ~200M elements a layer take a large share of a
GPU that is busy all the time ("GPU busy 99%").

--fix sdpa: F.scaled_dot_product_attention(q, k, v, is_causal=True) (flash attention in bf16).
Probe --compile: torch.compile of the same hand-written code (default mode).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _common import (
    StepBench,
    add_compile_probe,
    add_workload_args,
    chosen_fixes,
    compiled,
    pick_device,
    variant_name,
)
from _models import GPT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["sdpa"], steps=60)
    add_compile_probe(parser)
    parser.set_defaults(compile_mode="default")
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    batch = args.batch_size or (2 if args.tiny else 16)
    vocab, seq, d_model, n_layers, n_heads = (128, 32, 32, 2, 4) if args.tiny else (32000, 1024, 768, 12, 12)

    model = GPT(vocab, seq, d_model, n_layers, n_heads, attention="sdpa" if "sdpa" in fixes else "manual")
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device.type == "cuda")
    step_model = compiled(model, args, device)
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("gpt_manual_attention", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        chunk = data[step % n_batches]
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = step_model(x)
            loss = F.cross_entropy(logits.view(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
