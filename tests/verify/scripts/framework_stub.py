"""Fixture (synthetic): a CPU loop that builds the stub TrainingArguments and Lightning Trainer
(tests/verify/scripts/stub_frameworks) and dumps what they hold at step 3."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stub_frameworks"))

import torch
from lightning.pytorch.trainer.trainer import Trainer
from transformers import TrainingArguments

targs = TrainingArguments(output_dir="unused")
trainer = Trainer(max_steps=10)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 40):
    out = model(torch.ones(8, 4))
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 3:
        with open(sys.argv[1], "w") as fh:
            json.dump(
                {
                    "bf16": targs.bf16,
                    "tf32": targs.tf32,
                    "validated": targs.validated,
                    "precision": trainer.precision,
                    "output_dtype": str(out.dtype),
                },
                fh,
                sort_keys=True,
            )
