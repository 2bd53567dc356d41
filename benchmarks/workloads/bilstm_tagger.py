"""Planted problem: host_sync through explicit synchronization (fix `remove_host_syncs`). A BiLSTM tagger.

A sequence tagger (word embedding 128 over a 30k-word vocabulary, a 2-layer bidirectional LSTM of 256
(cuDNN, packed sequences), a linear layer to 17 tags; Adam, TF32 on) trained on sentences of 8-120
words stored as Python lists of words. Each step builds its batch of 64 on the host (vocabulary and
tag lookups in Python, `pad_sequence`, lengths for `pack_padded_sequence`: ~2-4 ms) and times itself
the way many hand-written loops do: `torch.cuda.synchronize()` before and after the step to log an
accurate per-step time.

Why it is slow on an H200: without the synchronizations the host prepares batch k+1 while the GPU
runs step k (~2-3 ms of cuDNN LSTM work); with them the host waits for every step to finish before it
starts building the next batch, so the GPU idles through each batch's preparation: the step costs
host preparation + GPU time instead of the larger of the two.

--fix remove_host_syncs: the per-step time is taken with CUDA events recorded in the stream and read
once per log interval (every 100 steps); no `torch.cuda.synchronize()` in the loop.
"""

from __future__ import annotations

import argparse
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

TAGS = ["ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT",
        "SCONJ", "SYM", "VERB", "X"]
PAD = -100
LOG_EVERY = 100


def make_corpus(n: int, vocab_words: int, max_len: int) -> list[tuple[list[str], list[str]]]:
    """Synthetic tagged sentences: (words, tags) as strings, lengths 8..max_len."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(vocab_words)]
    return [([rng.choice(words) for _ in range(length)], [rng.choice(TAGS) for _ in range(length)])
            for length in (rng.randint(8, max_len) for _ in range(n))]


class BiLSTMTagger(nn.Module):
    def __init__(self, vocab: int, emb: int, hidden: int, tags: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.lstm = nn.LSTM(emb, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(self.embed(ids), lengths, batch_first=True, enforce_sorted=False)
        h, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=ids.shape[1])
        return self.out(h)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["remove_host_syncs"], steps=2000)
    args = parser.parse_args()
    fixed = "remove_host_syncs" in chosen_fixes(args)

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = pick_device(args.tiny)
    cuda = device.type == "cuda"
    batch = args.batch_size or (4 if args.tiny else 64)
    vocab_words, emb, hidden, max_len = (500, 16, 16, 20) if args.tiny else (30_000, 128, 256, 120)

    corpus = make_corpus(200 if args.tiny else 5_000, vocab_words, max_len)
    word_to_id = {w: i + 2 for i, w in enumerate(f"w{i}" for i in range(vocab_words))}  # 0 pad, 1 unknown
    tag_to_id = {t: i for i, t in enumerate(TAGS)}
    model = BiLSTMTagger(len(word_to_id) + 2, emb, hidden, len(TAGS)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = random.Random(1)

    step_times: list[float] = []
    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    bench = StepBench("bilstm_tagger", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        sentences = rng.sample(corpus, batch)
        ids = pad_sequence([torch.tensor([word_to_id.get(w, 1) for w in words]) for words, _ in sentences],
                           batch_first=True)
        tags = pad_sequence([torch.tensor([tag_to_id[t] for t in ts]) for _, ts in sentences],
                            batch_first=True, padding_value=PAD)
        lengths = torch.tensor([len(words) for words, _ in sentences])  # stays on the CPU (packing)

        if fixed and cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        elif cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()

        logits = model(ids.to(device), lengths)
        loss = F.cross_entropy(logits.reshape(-1, len(TAGS)), tags.to(device).reshape(-1), ignore_index=PAD)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

        if fixed and cuda:
            end.record()
            events.append((start, end))
            if (step + 1) % LOG_EVERY == 0:
                end.synchronize()  # once per log interval
                step_times += [a.elapsed_time(b) / 1000.0 for a, b in events]
                events.clear()
        else:
            if cuda:
                torch.cuda.synchronize()
            step_times.append(time.perf_counter() - t0)
        if (step + 1) % LOG_EVERY == 0 and step_times:
            print(f"step {step + 1}: {1000 * sum(step_times[-LOG_EVERY:]) / len(step_times[-LOG_EVERY:]):.2f} ms/step")
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
