"""Planted problem: data_loading (fix `dataloader_workers`). A transformer text classifier.

A BERT-style classifier (nn.TransformerEncoder, 6 layers, d_model 512, 8 heads, seq 128, 20 classes;
bf16 autocast, fused AdamW) fine-tuned on raw text. The Dataset tokenizes in `__getitem__` with a
pure-Python WordPiece-style tokenizer (lowercasing, regex word/punctuation split, greedy longest-match
subwords against a ~4k-entry vocabulary, truncation and padding to 128, attention mask), as quick
in-house pipelines do, and the DataLoader runs with its defaults: `num_workers=0`.

Why it is slow on an H200: tokenizing one ~50-word document costs ~0.3-0.5 ms of Python, so a batch
of 64 costs ~20-30 ms in the training process itself, while the GPU needs ~4-5 ms for the step: the
GPU waits for the input pipeline ~80% of the time.

--fix dataloader_workers: `DataLoader(num_workers=8, pin_memory=True, persistent_workers=True,
prefetch_factor=4)` and non_blocking copies: eight processes tokenize in parallel (~3-4 ms per batch),
enough to keep up with the GPU.
"""

from __future__ import annotations

import argparse
import re

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from torch.utils.data import DataLoader, Dataset

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ven", "dar", "el", "qu", "ost", "ing", "er"]
PUNCT = [",", ".", ";", "!", "?"]
WORD_RE = re.compile(r"\w+|[^\w\s]")


class WordPieceTokenizer:
    """Greedy longest-match-first subword tokenizer (BERT's algorithm, in plain Python)."""

    def __init__(self, vocab: list[str], max_len: int) -> None:
        self.ids = {tok: i for i, tok in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *vocab])}
        self.max_len = max_len

    def word_pieces(self, word: str) -> list[int]:
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    pieces.append(self.ids[piece])
                    break
                end -= 1
            else:
                return [self.ids["[UNK]"]]
            start = end
        return pieces

    def __call__(self, text: str) -> tuple[list[int], list[int]]:
        ids = [self.ids["[CLS]"]]
        for word in WORD_RE.findall(text.lower()):
            ids.extend(self.word_pieces(word))
        ids = [*ids[: self.max_len - 1], self.ids["[SEP]"]]
        mask = [1] * len(ids) + [0] * (self.max_len - len(ids))
        return ids + [0] * (self.max_len - len(ids)), mask


def build_vocab() -> list[str]:
    """Whole words of 1-3 syllables, and continuation pieces (##) of 1-2 syllables: ~3.9k entries."""
    one = SYLLABLES
    two = [a + b for a in one for b in one]
    three = [a + b for a in two for b in one]
    return [*PUNCT, *one, *two, *three, *("##" + p for p in one + two)]


def build_words(n: int) -> list[str]:
    """A lexicon of the words documents are made of: 1-5 syllables (longer ones split into pieces)."""
    rng = np.random.default_rng(0)
    return ["".join(rng.choice(SYLLABLES, size=int(k))) for k in rng.integers(1, 6, size=n)]


class RawTextDataset(Dataset[tuple[torch.Tensor, torch.Tensor, int]]):
    """Synthetic documents generated from the index, tokenized on access."""

    def __init__(self, length: int, words: int, tokenizer: WordPieceTokenizer, classes: int) -> None:
        self.length, self.words, self.tokenizer, self.classes = length, words, tokenizer, classes
        self.lexicon = build_words(5000)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        rng = np.random.default_rng(index)
        n_words = int(rng.integers(self.words // 2, self.words * 3 // 2))
        words = [self.lexicon[i] for i in rng.integers(0, len(self.lexicon), size=n_words)]
        text = " ".join(words).capitalize() + "."
        ids, mask = self.tokenizer(text)
        return torch.tensor(ids), torch.tensor(mask), index % self.classes


class TextClassifier(nn.Module):
    def __init__(self, vocab: int, seq: int, d_model: int, layers: int, heads: int, classes: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(1, seq, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.1, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.tok(ids) + self.pos, src_key_padding_mask=mask == 0)
        m = mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["dataloader_workers"], steps=400)
    args = parser.parse_args()
    fixed = "dataloader_workers" in chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (4 if args.tiny else 64)
    seq, d_model, layers, heads, classes, words = (32, 32, 2, 4, 5, 20) if args.tiny else (128, 512, 6, 8, 20, 50)
    tokenizer = WordPieceTokenizer(build_vocab(), seq)
    dataset = RawTextDataset(batch * args.steps, words, tokenizer, classes)
    if fixed:
        loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=2 if args.tiny else 8,
                            pin_memory=device.type == "cuda", persistent_workers=True, prefetch_factor=4,
                            drop_last=True)
    else:
        loader = DataLoader(dataset, batch_size=batch, shuffle=True, drop_last=True)

    model = TextClassifier(len(tokenizer.ids), seq, d_model, layers, heads, classes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    bench = StepBench("text_dataloader", variant_name(args), device, batch, args.steps)
    for ids, mask, labels in loader:
        ids, mask = ids.to(device, non_blocking=fixed), mask.to(device, non_blocking=fixed)
        labels = labels.to(device, non_blocking=fixed)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(ids, mask), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
