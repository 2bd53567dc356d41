"""Control (must stay quiet): a tuned GPT-style LM with autocast cross-entropy over a 32k vocabulary.

A 6-layer decoder (d_model 1024, 16 heads, seq 1024) with an untied LM head over a 32768-token
vocabulary, batch 16 (16k tokens per step), bf16 autocast around the model and `F.cross_entropy` on its
logits (autocast runs log_softmax and nll_loss in float32: PyTorch's documented mixed-precision
recipe), SDPA, TF32, fused AdamW, data on the GPU, one loss read every 50 steps. The loss over
[16384, 32768] logits is a real share of the step, on PyTorch's standard path (issue 41: a control of
this kind got "GA1105 medium 8%", never measured).

--fixed is accepted for symmetry with the planted workloads and changes nothing.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, pick_device, variant_name
from _models import GPT

LOG_EVERY = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=[], steps=60)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 16)
    vocab, seq, d_model, n_layers, n_heads = (256, 16, 32, 2, 4) if args.tiny else (32768, 1024, 1024, 6, 16)
    torch.backends.cuda.matmul.allow_tf32 = True

    model = GPT(vocab, seq, d_model, n_layers, n_heads)
    model.lm_head.weight = nn.Parameter(model.tok.weight.detach().clone())  # untied, as Llama-style models
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device.type == "cuda")
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("control_gpt_autocast_ce", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        chunk = data[step % n_batches]
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % LOG_EVERY == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
