"""A Hugging Face Trainer run at default (FP32) TrainingArguments, for `gpuadvisor verify` on a GPU.

A Llama-style causal LM built from a config (no download: random weights), trained on synthetic token
batches (random ids, the labels are the inputs) with `Trainer`. Nothing sets bf16, fp16 or tf32: the
matmuls run in plain FP32, which GA701 reports and which `verify` measures by switching
`TrainingArguments(bf16=True)` (and `tf32=True`) on in its trials.

    gpuadvisor profile tests/verify/scripts/hf_trainer.py --steps 60
    gpuadvisor verify RUN

--tiny: a 2-layer model and short sequences (CPU smoke test).
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from torch.utils.data import Dataset


class RandomTokens(Dataset):  # type: ignore[type-arg]
    """Synthetic causal-LM samples: random token ids, labels equal to the inputs."""

    def __init__(self, length: int, seq: int, vocab: int) -> None:
        self.length, self.seq, self.vocab = length, seq, vocab

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, self.vocab, (self.seq,), generator=g)
        return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()

    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    if args.tiny:
        cfg = LlamaConfig(
            vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
        )  # fmt: skip
        seq, batch = 16, args.batch_size or 2
    else:
        cfg = LlamaConfig(
            vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
            num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=512,
        )  # fmt: skip
        seq, batch = 512, args.batch_size or 16
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    data = RandomTokens(batch * args.steps, seq, cfg.vocab_size)
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=batch,
            max_steps=args.steps,
            learning_rate=3e-4,
            logging_strategy="no",
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            seed=0,
            use_cpu=args.tiny or not torch.cuda.is_available(),
        )
        Trainer(model=model, args=targs, train_dataset=data).train()
    print("finished", args.steps, flush=True)


if __name__ == "__main__":
    main()
