"""Planted problem: kernel_efficiency (`channels_last`). ResNet-50 already in bf16 autocast, but NCHW.

The same training loop as resnet50_fp32_nchw.py after the user turned on bf16 autocast and saw little
change: the model and inputs stay NCHW, so cuDNN still wraps its NHWC kernels in layout transposes and
the bf16 NCHW convolutions run well below the bf16 peak.

--fix channels_last: model and inputs in channels_last.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from _models import resnet50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["channels_last"], steps=60)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 128)
    size = 32 if args.tiny else 224
    torch.backends.cudnn.benchmark = True
    fmt = torch.channels_last if "channels_last" in fixes else torch.contiguous_format

    model = resnet50(tiny=args.tiny).to(device, memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    n_batches = 4
    images = torch.randn(n_batches, batch, 3, size, size, device=device)
    labels = torch.randint(0, 1000, (n_batches, batch), device=device)

    bench = StepBench("resnet50_bf16_nchw", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        x = images[step % n_batches].contiguous(memory_format=fmt)
        y = labels[step % n_batches]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
