"""Planted problem: memory (`remove_empty_cache`). torch.cuda.empty_cache() at the end of every step.

A GPT-style LM (8 layers, d_model 1024, seq 512, vocab 32768) at batch 8 in bf16 autocast with SDPA and
fused AdamW, data on the GPU, one loss read every 50 steps, that calls `torch.cuda.empty_cache()` after
each optimizer step "to keep memory low", as many scripts copied from forum answers do. Each call frees
every cached block (cudaFree synchronizes the device); the next step allocates its activations again
with cudaMalloc (issue 41: GA802 said 32%, removing the call measured 49%).

--fix remove_empty_cache: no empty_cache() in the loop (the caching allocator reuses its blocks).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from _models import GPT

LOG_EVERY = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["remove_empty_cache"], steps=100)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 8)
    vocab, seq, d_model, n_layers, n_heads = (128, 16, 32, 2, 4) if args.tiny else (32768, 512, 1024, 8, 16)
    torch.backends.cuda.matmul.allow_tf32 = True

    model = GPT(vocab, seq, d_model, n_layers, n_heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device.type == "cuda")
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("empty_cache_loop", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        chunk = data[step % n_batches]
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).view(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if "remove_empty_cache" not in fixes:
            torch.cuda.empty_cache()
        if (step + 1) % LOG_EVERY == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
