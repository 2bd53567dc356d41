"""Planted problem: memory, allocator churn (fix `expandable_segments`). A transformer on varying lengths.

A BERT-style masked-LM encoder (nn.TransformerEncoder, 4 pre-norm layers, d_model 512, 8 heads, vocab
8,192; bf16 autocast, fused AdamW) trained on dynamically padded batches: 32 sequences per batch,
padded to the batch's longest, so the length changes every step (64-1024 tokens in steps of 32,
long-tailed: short batches are common, long ones rare). The job shares its GPU with another service
and caps itself with `torch.cuda.set_per_process_memory_fraction` at 1.3x the peak that a trial step
on the longest length needed (measured at start-up).

Why it is slow on an H200: every step allocates activations of a new size. The caching allocator
splits its cached 2 MB-rounded segments for them and fragments; under the cap it soon cannot find a
large enough free block, frees every cached segment (`cudaFree`, which synchronizes the device) and
allocates again (`cudaMalloc`): several milliseconds of allocator calls and a drained GPU every few
steps, against ~2-3 ms of GPU work per step.

--fix expandable_segments: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (set by the script before
its first CUDA allocation): the allocator grows one segment by mapping pages instead of carving fixed
segments, so changing sizes reuse memory without freeing and re-allocating. (Both variants run in
fresh processes: the setting is read when the allocator starts.)
--compile (a probe, not a fix): the model under torch.compile as GA501 advises (`--compile-mode`, default
reduce-overhead): a new sequence length every step means recompiling (then dynamic shapes) and a CUDA
graph recorded per length, under the same memory cap.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
import torch.nn as nn
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

CAP_HEADROOM = 1.3


class MaskedLM(nn.Module):
    def __init__(self, vocab: int, max_len: int, d_model: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        return self.head(self.encoder(h))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["expandable_segments"], steps=1500)
    add_compile_probe(parser)
    args = parser.parse_args()
    if "expandable_segments" in chosen_fixes(args):
        # Read when the CUDA caching allocator starts (the first CUDA allocation, below). A torch that
        # parsed its allocator configuration at import gets the same setting at run time as well.
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        if torch.cuda.is_available() and hasattr(torch.cuda.memory, "_set_allocator_settings"):
            torch.cuda.memory._set_allocator_settings("expandable_segments:True")

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 32)
    vocab, min_len, max_len, step_len, d_model, layers, heads = (
        (256, 8, 32, 8, 32, 2, 4) if args.tiny else (8192, 64, 1024, 32, 512, 4, 8))
    lengths = np.arange(min_len, max_len + 1, step_len)
    weights = 1.0 / lengths**1.5
    rng = np.random.default_rng(0)

    model = MaskedLM(vocab, max_len, d_model, layers, heads).to(device)
    forward = compiled(model, args, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")

    def train_step(length: int) -> None:
        ids = torch.randint(0, vocab, (batch, length), device=device)
        targets = torch.randint(0, vocab, (batch, length), device=device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(forward(ids).reshape(-1, vocab), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    if device.type == "cuda":
        train_step(max_len)  # trial step at the longest length: how much memory does the job need?
        torch.cuda.synchronize()
        need = torch.cuda.max_memory_allocated(device)
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, CAP_HEADROOM * need / total), torch.cuda.current_device())
        print(f"memory cap {CAP_HEADROOM * need / 2**30:.2f} GiB (trial peak {need / 2**30:.2f} GiB)", flush=True)

    bench = StepBench("varlen_memory", variant_name(args), device, batch, args.steps)
    for _ in range(args.steps):
        train_step(int(rng.choice(lengths, p=weights / weights.sum())))
        bench.step()
    bench.finish()
    if device.type == "cuda":
        stats = torch.cuda.memory_stats(device)
        print(f"allocator: {stats.get('num_alloc_retries', 0)} retries, {stats.get('num_device_alloc', 0)} "
              f"cudaMalloc, {stats.get('num_device_free', 0)} cudaFree", flush=True)


if __name__ == "__main__":
    main()
