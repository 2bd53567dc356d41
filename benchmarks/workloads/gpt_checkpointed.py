"""Planted problem: memory (`no_checkpointing`). Every block under torch.utils.checkpoint, memory to spare.

A GPT-2-small-sized LM (12 layers, d_model 768, 12 heads, seq 1024, vocab 32768) at batch 8 in bf16
autocast with SDPA and fused AdamW, data on the GPU, one loss read every 50 steps; every transformer
block runs under `torch.utils.checkpoint(..., use_reentrant=False)`, as fine-tuning recipes switch on
(`gradient_checkpointing=True`). The backward runs each block's forward again, while the run uses a
few GB of an 80-141 GB GPU (issue 41: removing the checkpointing measured 1.18x; no finding).

--fix no_checkpointing: the blocks called directly (their activations kept).
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
    add_workload_args(parser, fixes=["no_checkpointing"], steps=60)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 8)
    vocab, seq, d_model, n_layers, n_heads = (128, 16, 32, 2, 4) if args.tiny else (32768, 1024, 768, 12, 12)
    torch.backends.cuda.matmul.allow_tf32 = True

    model = GPT(vocab, seq, d_model, n_layers, n_heads, checkpoint="no_checkpointing" not in fixes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device.type == "cuda")
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("gpt_checkpointed", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        chunk = data[step % n_batches]
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).view(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % LOG_EVERY == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
