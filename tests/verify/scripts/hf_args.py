"""Fixture (synthetic): a training loop configured by Hugging Face's HfArgumentParser over a dataclass
with TrainingArguments' own names (`--bf16`, `--per_device_train_batch_size`,
`--dataloader_num_workers`). It imports transformers' HfArgumentParser where transformers is
installed, else the stand-in next to it (hf_standin.py: the same API and options). The loop is
sleepy_loop.py's; --bf16 runs the model under CPU autocast.
"""

from dataclasses import dataclass

from sleepy_loop import train

try:
    from transformers import HfArgumentParser
except ImportError:
    from hf_standin import HfArgumentParser


@dataclass
class Args:
    per_device_train_batch_size: int = 4
    dataloader_num_workers: int = 0
    bf16: bool = False
    steps: int = 400
    sample_ms: float = 2.0
    step_ms: float = 4.0


(args,) = HfArgumentParser(Args).parse_args_into_dataclasses()

if __name__ == "__main__":
    train(args.per_device_train_batch_size, args.dataloader_num_workers, args.steps, args.sample_ms, args.step_ms,
          bf16=args.bf16)  # fmt: skip
