"""Control (must stay quiet): a bf16 MobileNetV2-style convnet already in channels_last.

Inverted-residual blocks (1x1 expansion, 3x3 depthwise, 1x1 projection, BatchNorm, ReLU6; 32-320
channels) on 224x224 images, batch 128, bf16 autocast, channels_last model and inputs, cudnn.benchmark,
fused AdamW, data on the GPU, no host reads in the loop: the depthwise and pointwise convolutions and
BatchNorm run their NHWC kernels, with no layout transposes for channels_last advice to find.

--fixed is accepted for symmetry with the planted workloads and changes nothing.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, pick_device, variant_name


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        self.body = nn.Sequential(conv_bn(cin, hidden, 1), conv_bn(hidden, hidden, 3, stride, groups=hidden),
                                  conv_bn(hidden, cout, 1, act=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    # (expansion, channels, repeats, stride) of MobileNetV2
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, classes: int = 1000, tiny: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, 32, 3, 2)]
        cin = 32
        for t, c, n, s in self.SETTINGS[:2] if tiny else self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(conv_bn(cin, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=[], steps=120)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 128)
    size = 32 if args.tiny else 224
    torch.backends.cudnn.benchmark = True
    cl = torch.channels_last

    model = MobileNetV2(tiny=args.tiny).to(device, memory_format=cl)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device.type == "cuda")
    n_batches = 4
    images = [torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=cl) for _ in range(n_batches)]
    labels = torch.randint(0, 1000, (n_batches, batch), device=device)

    bench = StepBench("control_mobilenet_cl", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images[step % n_batches]), labels[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
