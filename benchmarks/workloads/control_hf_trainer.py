"""Control (must stay quiet): a well-tuned Hugging Face Trainer run. A BERT-style classifier.

`BertForSequenceClassification` built from a config (no download: 6 layers, hidden 768, 12 heads,
seq 256, vocab 30522, 4 labels, ~67M parameters) trained by `transformers.Trainer` on a synthetic
torch Dataset with `TrainingArguments(bf16=True, tf32=True, per_device_train_batch_size=64,
dataloader_num_workers=2, dataloader_pin_memory=True, dataloader_persistent_workers=True,
logging_nan_inf_filter=False)` and the default fused AdamW: tensor-core math, a batch that keeps the
GPU busy (~2.4 TFLOP per step), the input pipeline off the critical path, and no per-step host read
(`logging_nan_inf_filter=True`, the default, tests the loss for NaN on the host every step).
Needs `transformers` and `accelerate` (benchmarks/requirements-frameworks.txt).

--fixed is accepted for symmetry with the planted workloads and changes nothing.
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

import torch
from _common import StepBench, add_workload_args, pick_device, variant_name
from torch.utils.data import Dataset
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


class RandomSentences(Dataset[dict[str, torch.Tensor]]):
    """Synthetic pre-tokenized sentences with labels."""

    def __init__(self, n: int, seq: int, vocab: int, labels: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)
        self.labels = torch.randint(0, labels, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]),
                "labels": self.labels[i]}


class BenchCallback(TrainerCallback):
    def __init__(self, bench: StepBench) -> None:
        self.bench = bench

    def on_step_end(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        self.bench.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=[], steps=400)
    args = parser.parse_args()
    torch.manual_seed(0)

    if args.tiny:
        config = BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                            vocab_size=512, max_position_embeddings=64, num_labels=4)
        seq = 32
    else:
        config = BertConfig(num_hidden_layers=6, hidden_size=768, num_attention_heads=12,
                            intermediate_size=3072, vocab_size=30522, num_labels=4)
        seq = 256
    model = BertForSequenceClassification(config)
    batch = args.batch_size or (4 if args.tiny else 64)
    train_dataset = RandomSentences(batch * 64, seq, config.vocab_size, config.num_labels)

    training_args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="control_hf_trainer-"),
        max_steps=args.steps,
        per_device_train_batch_size=batch,
        bf16=True,
        tf32=not args.tiny,  # TF32 needs an Ampere+ GPU
        dataloader_num_workers=2,
        dataloader_pin_memory=True,
        dataloader_persistent_workers=True,
        logging_nan_inf_filter=False,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=args.tiny,
    )
    bench = StepBench("control_hf_trainer", variant_name(args), pick_device(args.tiny), batch, args.steps)
    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset,
                      callbacks=[BenchCallback(bench)])
    trainer.train()
    bench.finish()


if __name__ == "__main__":
    main()
