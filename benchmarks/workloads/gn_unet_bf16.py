"""Planted problem under test: kernel_efficiency (`channels_last`). A GroupNorm/interpolate UNet in bf16.

A 4-level UNet of GroupNorm blocks (64-512 channels: 3x3 conv, GroupNorm(32), SiLU), average-pool
downsampling, bilinear `F.interpolate` upsampling and skip concatenations, on 256x256 images, batch 16,
bf16 autocast, cudnn.benchmark, fused AdamW, data on the GPU. The model and inputs are NCHW, so cuDNN's
NHWC bf16 convolution kernels come with layout transposes; but most of the time is in GroupNorm,
upsampling and concatenation, families whose channels_last paths PyTorch may run slower (issue 41: a
network of this kind measured 0.74x after conversion while the advice said "channels_last saves 26%").

--fix channels_last: model and inputs in channels_last. The measurement says which way it goes; the
advice must agree in sign (benchmarks/nhwc_table.py measures each op family alone).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from _models import GNUNet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["channels_last"], steps=60)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 16)
    size, width = (32, 8) if args.tiny else (256, 64)
    torch.backends.cudnn.benchmark = True
    fmt = torch.channels_last if "channels_last" in fixes else torch.contiguous_format

    model = GNUNet(width).to(device, memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    n_batches = 4
    images = [torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=fmt)
              for _ in range(n_batches)]
    targets = [torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=fmt)
               for _ in range(n_batches)]

    bench = StepBench("gn_unet_bf16", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.mse_loss(model(images[step % n_batches]), targets[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
