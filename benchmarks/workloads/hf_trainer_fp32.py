"""Planted problem: fp32_math (fix `bf16`). A transformer LM trained by the Hugging Face Trainer.

A GPT-2-style causal LM built from a config (no download): `GPT2LMHeadModel(GPT2Config(n_layer=6,
n_embd=768, n_head=12, n_positions=512, vocab_size=32000))`, 67M parameters, trained by
`transformers.Trainer` on a synthetic torch Dataset of 512-token sequences with `TrainingArguments`
left at their defaults where speed is concerned: FP32 (`bf16=False`, `tf32=None`: PyTorch's default,
no TF32 for matmuls), `per_device_train_batch_size=8`, the default fused AdamW, no DataLoader workers.
Only bookkeeping is set: `max_steps`, `report_to="none"`, `save_strategy="no"`, `disable_tqdm=True`,
a temporary `output_dir`. Needs `transformers` and `accelerate` (benchmarks/requirements-frameworks.txt).
The BENCH line comes from a TrainerCallback (`on_step_end`).

Why it is slow on an H200: a step is ~1.7 TFLOP (6 x 67M parameters x 4096 tokens, plus attention),
almost all GEMMs, which in strict FP32 run on CUDA cores (~50-60 TFLOP/s): ~30 ms of a ~35 ms step.

--fix bf16: `TrainingArguments(bf16=True)` (bf16 autocast; the same GEMMs on tensor cores).
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

import torch
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class RandomTokens(Dataset[dict[str, torch.Tensor]]):
    """Synthetic pre-tokenized text: deterministic random token ids, labels = input ids."""

    def __init__(self, n: int, seq: int, vocab: int) -> None:
        self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class BenchCallback(TrainerCallback):
    def __init__(self, bench: StepBench) -> None:
        self.bench = bench

    def on_step_end(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        self.bench.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["bf16"], steps=400)
    args = parser.parse_args()
    fixes = chosen_fixes(args)
    torch.manual_seed(0)

    if args.tiny:
        config = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64, vocab_size=512)
    else:
        config = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=512, vocab_size=32000)
    model = GPT2LMHeadModel(config)
    batch = args.batch_size or (2 if args.tiny else 8)
    train_dataset = RandomTokens(batch * 64, config.n_positions, config.vocab_size)

    training_args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="hf_trainer_fp32-"),
        max_steps=args.steps,
        per_device_train_batch_size=batch,
        bf16="bf16" in fixes,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=args.tiny,
    )
    bench = StepBench("hf_trainer_fp32", variant_name(args), pick_device(args.tiny), batch, args.steps)
    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset,
                      callbacks=[BenchCallback(bench)])
    trainer.train()
    bench.finish()


if __name__ == "__main__":
    main()
