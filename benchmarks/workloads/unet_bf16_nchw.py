"""Planted problem: kernel_efficiency (`channels_last`). A segmentation UNet in bf16 autocast, NCHW.

A 4-level UNet (64-512 channels, two 3x3 conv + BatchNorm + ReLU per level, transposed-conv upsampling,
skip concatenations) on 256x256 images, batch 32, bf16 autocast, cudnn.benchmark, AdamW (fused), data
on the GPU. The model and inputs are NCHW, so cuDNN's NHWC bf16 kernels come wrapped in layout
transposes, and the concatenations and normalizations move NCHW tensors.

--fix channels_last: model and inputs in channels_last.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name


def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, classes: int, width: int) -> None:
        super().__init__()
        w = [width * 2**i for i in range(5)]
        self.inc = double_conv(3, w[0])
        self.downs = nn.ModuleList([double_conv(w[i], w[i + 1]) for i in range(4)])
        self.ups = nn.ModuleList([nn.ConvTranspose2d(w[i + 1], w[i], 2, stride=2) for i in reversed(range(4))])
        self.up_convs = nn.ModuleList([double_conv(2 * w[i], w[i]) for i in reversed(range(4))])
        self.outc = nn.Conv2d(w[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(F.max_pool2d(skips[-1], 2)))
        x = skips.pop()
        for up, conv in zip(self.ups, self.up_convs, strict=True):
            x = conv(torch.cat([skips.pop(), up(x)], dim=1))
        return self.outc(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["channels_last"], steps=60)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 32)
    size, width, classes = (32, 4, 3) if args.tiny else (256, 32, 21)
    torch.backends.cudnn.benchmark = True
    fmt = torch.channels_last if "channels_last" in fixes else torch.contiguous_format

    model = UNet(classes, width).to(device, memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cuda")
    n_batches = 4
    images = [torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=fmt)
              for _ in range(n_batches)]
    masks = torch.randint(0, classes, (n_batches, batch, size, size), device=device)

    bench = StepBench("unet_bf16_nchw", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images[step % n_batches]), masks[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
