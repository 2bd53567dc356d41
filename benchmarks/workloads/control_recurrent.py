"""Control (must stay quiet): a well-tuned recurrent language model. A 2-layer LSTM (cuDNN).

A word-level LSTM LM (embedding 1024, 2 LSTM layers of 1024, tied 10k-word decoder) trained with
truncated backpropagation (bptt 128) at batch 256 on a token stream resident on the GPU. TF32 is on
for matmuls and cuDNN (the LSTM and the decoder run on tensor cores), the optimizer is fused AdamW,
gradients are clipped with the foreach implementation, and the loss is read once every 100 steps:
each step is a few large cuDNN RNN and GEMM kernels (~5 TFLOP), so the GPU sets the pace.

--fixed is accepted for symmetry with the planted workloads and changes nothing.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, pick_device, variant_name

LOG_EVERY = 100


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, dim, layers, batch_first=True)
        self.decoder = nn.Linear(dim, vocab)
        self.decoder.weight = self.embed.weight

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        out, state = self.rnn(self.embed(x), state)
        return self.decoder(out), state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=[], steps=600)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device = pick_device(args.tiny)
    batch = args.batch_size or (4 if args.tiny else 256)
    vocab, dim, layers, bptt = (200, 32, 2, 16) if args.tiny else (10_000, 1024, 2, 128)

    model = LSTMLanguageModel(vocab, dim, layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cuda")
    stream = torch.randint(0, vocab, (batch, 64 * bptt + 1), device=device)  # batchified token stream
    state: tuple[torch.Tensor, torch.Tensor] | None = None
    loss_sum = torch.zeros((), device=device)

    bench = StepBench("control_recurrent", variant_name(args), device, batch, args.steps)
    n_chunks = (stream.shape[1] - 1) // bptt
    for step in range(args.steps):
        i = (step % n_chunks) * bptt
        x, y = stream[:, i:i + bptt], stream[:, i + 1:i + 1 + bptt]
        if step % n_chunks == 0:
            state = None  # a new pass over the stream
        elif state is not None:
            state = (state[0].detach(), state[1].detach())  # truncated backpropagation through time
        logits, state = model(x, state)
        loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        loss_sum += loss.detach()
        if (step + 1) % LOG_EVERY == 0:
            print(f"step {step + 1} loss {loss_sum.item() / LOG_EVERY:.4f}", flush=True)  # the only sync
            loss_sum.zero_()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
