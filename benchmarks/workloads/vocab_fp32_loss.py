"""Planted problem: kernel_efficiency (`fused_cross_entropy`). An FP32 loss over a 128k vocabulary.

A small bf16 LM (4 layers, d_model 512, SDPA, fused AdamW, data on the GPU) with Llama-3's 128256-token
vocabulary, 8k tokens per step. The model runs in bf16, but the loss is written "for stability": the
logits are upcast to FP32 (`logits.float()`, a 4 GB copy of a 2 GB tensor) and the log-softmax is written
out (`logits - logits.logsumexp(-1)` then `gather`), so a chain of memory-bound FP32 passes over
[8192, 128256] in the forward and again in the backward outweighs the whole transformer.

--fix fused_cross_entropy: F.cross_entropy on the bf16 logits (PyTorch accumulates in FP32 inside its
log-softmax kernel; no FP32 copy of the logits, one fused pass each way).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from _models import GPT


def fp32_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = logits.float()
    logprobs = logits - logits.logsumexp(dim=-1, keepdim=True)
    return -logprobs.gather(-1, targets.unsqueeze(-1)).mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["fused_cross_entropy"], steps=60)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    torch.backends.cuda.matmul.allow_tf32 = True
    batch = args.batch_size or (2 if args.tiny else 8)
    vocab, seq, d_model, n_layers, n_heads = (1000, 16, 32, 2, 4) if args.tiny else (128256, 1024, 512, 4, 8)

    model = GPT(vocab, seq, d_model, n_layers, n_heads, attention="sdpa").to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device.type == "cuda")
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("vocab_fp32_loss", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        chunk = data[step % n_batches]
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(x).view(-1, vocab)
        if "fused_cross_entropy" in fixes:
            loss = F.cross_entropy(logits, y.reshape(-1))
        else:
            loss = fp32_cross_entropy(logits, y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
