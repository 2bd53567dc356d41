"""Planted problems: small_batch (fix `larger_batch`) and host_sync (fix `remove_host_syncs`). An LSTM LM.

A word-level language model in the style of pytorch/examples `word_language_model`: embedding 650,
a 2-layer LSTM of 650 (cuDNN), dropout 0.5, a tied decoder over a 10k-word vocabulary, truncated
backpropagation over 35-token chunks, batch 20 (that example's defaults), `clip_grad_norm_(0.25)`, a
hand-written SGD update (`p.data.add_(p.grad, alpha=-lr)`, lr 20) and `total_loss += loss.item()`
after every batch. The token stream is synthetic and already on the GPU (batchified, as the example
does). TF32 is allowed for matmuls so that the decoder's GEMMs are not a third problem.

Why it is slow on an H200: 20 sequences x 35 tokens is 700 tokens per step: every kernel (the LSTM's
per-timestep work, the decoder, the ~30 small ops of the update and clipping) is tiny, so the step is
paced by launches and the cuDNN RNN's sequential latency (~2-4 ms) while the GPU's SMs are mostly idle;
and the `.item()` makes the host wait for the whole step before it queues the next one.

--fix larger_batch: batch 256 (the LSTM's per-timestep GEMMs get 13x wider for little extra time).
--fix remove_host_syncs: the loss is summed on the GPU and read once per log interval (200 batches).
--fixed: both.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name

LOG_INTERVAL = 200


class RNNModel(nn.Module):
    """Encoder, recurrent module and decoder, as in pytorch/examples (LSTM flavour)."""

    def __init__(self, ntoken: int, ninp: int, nhid: int, nlayers: int, dropout: float = 0.5) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight = self.encoder.weight  # tie weights (ninp == nhid)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, inp: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        emb = self.drop(self.encoder(inp))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.decoder.out_features)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Wraps hidden states in new Tensors, to detach them from their history."""
    return (h[0].detach(), h[1].detach())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["larger_batch", "remove_host_syncs"], steps=4000)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(1111)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = pick_device(args.tiny)
    larger = 16 if args.tiny else 256
    batch_size = args.batch_size or (larger if "larger_batch" in fixes else (2 if args.tiny else 20))
    ntokens, emsize, bptt, lr, clip = (200, 32, 8, 20.0, 0.25) if args.tiny else (10_000, 650, 35, 20.0, 0.25)

    # batchify: a synthetic corpus of 2M tokens arranged as [tokens per column, batch_size] on the GPU
    corpus = torch.randint(0, ntokens, (20_000 if args.tiny else 2_000_000,))
    nbatch = corpus.size(0) // batch_size
    train_data = corpus[: nbatch * batch_size].view(batch_size, -1).t().contiguous().to(device)

    model = RNNModel(ntokens, emsize, emsize, 2).to(device)
    criterion = nn.NLLLoss()
    model.train()
    hidden = model.init_hidden(batch_size)
    total_loss = 0.0
    total_loss_gpu = torch.zeros((), device=device)

    bench = StepBench("lstm_lm", variant_name(args), device, batch_size, args.steps)
    n_chunks = (train_data.size(0) - 1) // bptt
    for step in range(args.steps):
        i = (step % n_chunks) * bptt
        data, targets = train_data[i:i + bptt], train_data[i + 1:i + 1 + bptt].reshape(-1)
        # Starting each batch, we detach the hidden state from how it was previously produced.
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            if p.grad is not None:
                p.data.add_(p.grad, alpha=-lr)
        if "remove_host_syncs" in fixes:
            total_loss_gpu += loss.detach()
            if (step + 1) % LOG_INTERVAL == 0:
                cur_loss = total_loss_gpu.item() / LOG_INTERVAL
                print(f"| batch {step + 1:5d} | loss {cur_loss:5.2f} | ppl {math.exp(min(cur_loss, 50)):8.2f}")
                total_loss_gpu.zero_()
        else:
            total_loss += loss.item()
            if (step + 1) % LOG_INTERVAL == 0:
                cur_loss = total_loss / LOG_INTERVAL
                print(f"| batch {step + 1:5d} | loss {cur_loss:5.2f} | ppl {math.exp(min(cur_loss, 50)):8.2f}")
                total_loss = 0.0
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
