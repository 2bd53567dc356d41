"""Planted problems: host_device_transfer (fix `prefetch_copies`) and host_sync (fix `remove_host_syncs`).

An embedding-heavy click-through-rate model in the style of DLRM: 26 sparse features, each an
`nn.EmbeddingBag(100_000, 64, mode="sum")` over a multi-hot bag of 20 ids, 13 dense features through a
bottom MLP (13 -> 512 -> 256 -> 64), pairwise dot-product interaction of the 27 vectors, a top MLP
(415 -> 512 -> 256 -> 1) and BCE-with-logits; batch 4096, Adam, TF32 on. The input pipeline hands over
CPU tensors the way many DLRM ports do: per sparse feature an int64 `indices` and `offsets` tensor,
plus the dense features and labels, each moved with its own blocking `.to(device)` from pageable
memory (54 copies per step, ~18 MB). After every step the script computes the batch's AUC for its
progress log on the host: `torch.sigmoid(logits).detach().cpu().numpy()` and the labels, ranked with numpy.

Why it is slow on an H200: the model's GPU work is ~2-3 ms (embedding-bag gathers, the dense Adam
update of 166M embedding parameters, small MLPs). Each pageable copy blocks the host (~18 MB at
~10 GB/s plus 54 synchronizations: ~3 ms with the GPU idle), and the `.cpu()` for the AUC waits for
the whole step and keeps the host busy ranking 4096 scores while the GPU idles.

--fix prefetch_copies: the batches are page-locked and copied with non_blocking=True on a side CUDA
stream one step ahead (overlapping the previous step's compute).
--fix remove_host_syncs: scores and labels stay on the GPU; the AUC over the last 100 batches is
computed there (rank-based, with torch) and read once every 100 steps.
--fixed: both.
--compile (a probe, not a fix): the model under torch.compile as GA501 advises (`--compile-mode`,
default reduce-overhead: fusion and CUDA graphs), to measure what compiling gains here.
--fused-adam (a probe, not a fix): `Adam(fused=True)` as GA502 advises (the foreach update of the
166M embedding parameters makes several passes over 2.7 GB of parameter and optimizer state).
"""

from __future__ import annotations

import argparse
import itertools

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

N_SPARSE, N_DENSE, BAG = 26, 13, 20
LOG_EVERY = 100

Batch = tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor]


def mlp(sizes: list[int], last_activation: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if last_activation or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, rows: int, dim: int) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList([nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(N_SPARSE)])
        self.bottom = mlp([N_DENSE, 512, 256, dim])
        n = N_SPARSE + 1
        self.register_buffer("pairs", torch.triu_indices(n, n, offset=1), persistent=False)
        self.top = mlp([dim + n * (n - 1) // 2, 512, 256, 1], last_activation=False)

    def forward(self, indices: list[torch.Tensor], offsets: list[torch.Tensor], dense: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        vectors = [x] + [emb(i, o) for emb, i, o in zip(self.embeddings, indices, offsets, strict=True)]
        t = torch.stack(vectors, dim=1)  # [batch, 27, dim]
        dots = torch.bmm(t, t.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)


def make_batches(n: int, batch: int, rows: int) -> list[Batch]:
    """Synthetic Criteo-like batches: per feature a flat id list and bag offsets, dense values, labels."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        indices = [torch.randint(0, rows, (batch * BAG,), generator=g) for _ in range(N_SPARSE)]
        offsets = [torch.arange(0, batch * BAG, BAG) for _ in range(N_SPARSE)]
        dense = torch.rand(batch, N_DENSE, generator=g).log1p_()
        labels = (torch.rand(batch, generator=g) < 0.25).float()
        out.append((indices, offsets, dense, labels))
    return out


def auc_numpy(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC by ranks (Mann-Whitney U)."""
    ranks = np.empty(len(scores))
    ranks[np.argsort(scores)] = np.arange(1, len(scores) + 1)
    pos = labels > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / max(1, n_pos * n_neg))


def auc_torch(labels: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """The same AUC on the device, returned as a tensor (no host read)."""
    ranks = torch.empty_like(scores)
    ranks[torch.argsort(scores)] = torch.arange(1, len(scores) + 1, device=scores.device, dtype=scores.dtype)
    pos = labels > 0.5
    n_pos = pos.sum()
    n_neg = (~pos).sum()
    return ((ranks * pos).sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg).clamp(min=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["prefetch_copies", "remove_host_syncs"], steps=2000)
    add_compile_probe(parser)
    parser.add_argument("--fused-adam", action="store_true", help="probe: Adam(fused=True)")
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = pick_device(args.tiny)
    batch = args.batch_size or (8 if args.tiny else 4096)
    rows, dim = (1000, 8) if args.tiny else (100_000, 64)

    model = DLRM(rows, dim).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True if args.fused_adam else None)
    model = compiled(model, args, device)
    batches = make_batches(4, batch, rows)
    pin = "prefetch_copies" in fixes and device.type == "cuda"
    if pin:
        batches = [([i.pin_memory() for i in ix], [o.pin_memory() for o in ox], d.pin_memory(), y.pin_memory())
                   for ix, ox, d, y in batches]
    copy_stream = torch.cuda.Stream() if pin else None

    def to_device(b: Batch, non_blocking: bool) -> Batch:
        ix, ox, d, y = b
        return ([i.to(device, non_blocking=non_blocking) for i in ix],
                [o.to(device, non_blocking=non_blocking) for o in ox],
                d.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking))

    def fetch(step: int) -> Batch:
        b = batches[step % len(batches)]
        if copy_stream is None:
            return to_device(b, non_blocking=False)
        with torch.cuda.stream(copy_stream):
            return to_device(b, non_blocking=True)

    upcoming = fetch(0) if copy_stream is not None else None
    scores_log: list[torch.Tensor] = []
    labels_log: list[torch.Tensor] = []
    aucs: list[float] = []
    bench = StepBench("dlrm", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        if copy_stream is not None and upcoming is not None:
            torch.cuda.current_stream().wait_stream(copy_stream)
            indices, offsets, dense, labels = upcoming
            for t in [*indices, *offsets, dense, labels]:
                t.record_stream(torch.cuda.current_stream())
            upcoming = fetch(step + 1)
        else:
            indices, offsets, dense, labels = fetch(step)
        logits = model(indices, offsets, dense)
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if "remove_host_syncs" in fixes:
            scores_log.append(torch.sigmoid(logits.detach()))
            labels_log.append(labels)
            if (step + 1) % LOG_EVERY == 0:
                aucs.append(auc_torch(torch.cat(labels_log), torch.cat(scores_log)).item())  # once per 100 steps
                scores_log.clear()
                labels_log.clear()
        else:
            aucs.append(auc_numpy(labels.cpu().numpy(), torch.sigmoid(logits).detach().cpu().numpy()))
        if (step + 1) % LOG_EVERY == 0:
            print(f"step {step + 1} auc {aucs[-1]:.4f}", flush=True)
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
