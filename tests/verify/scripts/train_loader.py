"""Fixture (synthetic): a small CPU training loop fed by a DataLoader, with knobs for the verify tests.

--sample-ms      per-sample work in Dataset.__getitem__ (a sleep: reading and decoding a file)
--step-ms        per-step device time of the training step (a sleep: what a GPU step costs the host)
--loss sum       a sum-reduced loss at the edge of stability: a larger batch makes it diverge (NaN/Inf)
--fail-in-worker the Dataset refuses to run in a DataLoader worker process
--model conv     a small conv net (channels_last, cudnn) instead of a linear model
--dump FILE      at step --dump-step, write what the loop sees (DataLoader, optimizer, switches,
                 precision and layout inside forward) as JSON: the injection tests compare them
"""

import argparse
import json
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--sample-ms", type=float, default=0.0)
p.add_argument("--step-ms", type=float, default=0.0)
p.add_argument("--loss", choices=["mean", "sum"], default="mean")
p.add_argument("--lr", type=float, default=0.01)
p.add_argument("--fail-in-worker", action="store_true")
p.add_argument("--model", choices=["linear", "conv"], default="linear")
p.add_argument("--optimizer", choices=["sgd", "adamw", "rmsprop"], default="sgd")
p.add_argument("--dump", default=None)
p.add_argument("--dump-step", type=int, default=3)
p.add_argument("--strict-fp32", action="store_true", help="turn TF32 off, as an FP32 script does")
args = p.parse_args()
if args.strict_fp32:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

DIM = 4


class SlowDataset(Dataset):
    """Constant inputs (so the sum-loss case has a known stability limit), a sleep per sample."""

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        if args.fail_in_worker and torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("this dataset cannot run in a DataLoader worker")
        if args.sample_ms:
            time.sleep(args.sample_ms / 1000.0)
        if args.model == "conv":
            return torch.full((3, 8, 8), 0.5), torch.tensor(1.0)
        return torch.ones(DIM), torch.tensor(1.0)


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x):
        seen["forward_autocast"] = torch.is_autocast_enabled("cpu")
        seen["input_channels_last"] = x.is_contiguous(memory_format=torch.channels_last)
        return self.head(self.conv(x).mean(dim=(2, 3))).squeeze(1)


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(DIM, 1, bias=False)
        torch.nn.init.zeros_(self.fc.weight)

    def forward(self, x):
        seen["forward_autocast"] = torch.is_autocast_enabled("cpu")
        return self.fc(x).squeeze(1)


seen: dict = {}
loader = DataLoader(SlowDataset(), batch_size=args.batch, shuffle=False, num_workers=0)
model = ConvNet() if args.model == "conv" else Linear()
if args.optimizer == "adamw":
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
elif args.optimizer == "rmsprop":  # takes foreach, not fused
    opt = torch.optim.RMSprop(model.parameters(), lr=args.lr)
else:
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
step = 0
while step < args.steps:
    for x, y in loader:
        out = model(x)
        err = out - y
        loss = (err * err).sum() if args.loss == "sum" else (err * err).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.step_ms:
            time.sleep(args.step_ms / 1000.0)
        step += 1
        if args.dump and step == args.dump_step:
            conv_weight = getattr(getattr(model, "conv", None), "weight", None)
            state = {
                "num_workers": loader.num_workers,
                "pin_memory": loader.pin_memory,
                "persistent_workers": loader.persistent_workers,
                "prefetch_factor": loader.prefetch_factor,
                "batch_size": loader.batch_size,
                "batch_rows": int(x.shape[0]),
                "optimizer_fused": opt.defaults.get("fused"),
                "optimizer_foreach": opt.defaults.get("foreach"),
                "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
                "float32_matmul_precision": torch.get_float32_matmul_precision(),
                "cudnn_benchmark": torch.backends.cudnn.benchmark,
                "output_dtype": str(out.dtype),
                "weight_channels_last": None
                if conv_weight is None
                else conv_weight.is_contiguous(memory_format=torch.channels_last),
                "compiled": getattr(model, "_compiled_call_impl", None) is not None,
                "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                **seen,
            }
            with open(args.dump, "w") as fh:
                json.dump(state, fh, sort_keys=True)
        if step >= args.steps:
            break
print("finished", step, flush=True)
