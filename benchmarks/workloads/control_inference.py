"""Control (must stay quiet): a well-tuned batch-inference loop. A CNN, no training.

The convnet of inference_convnet.py made wider (4 stride-2 3x3 convs 3 -> 64 -> 128 -> 256 -> 512,
BatchNorm, ReLU, pooled 100-class head; eval mode) scoring 16,384 RGB 96x96 images already on the GPU
(uint8) at batch 1024 under `torch.inference_mode()`, bf16 autocast, channels_last and
cudnn.benchmark. Predictions and confidences are written into preallocated GPU tensors and copied back
once, after the loop: no per-batch host read, kernels large enough to fill the GPU (~190 GFLOP per batch).

--fixed is accepted for symmetry with the planted workloads and changes nothing.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from _common import StepBench, add_workload_args, pick_device, variant_name


def conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class ConvNet(nn.Module):
    def __init__(self, num_classes: int = 100) -> None:
        super().__init__()
        self.features = nn.Sequential(conv_bn(3, 64), conv_bn(64, 128), conv_bn(128, 256), conv_bn(256, 512))
        self.head = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=[], steps=2000)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    device = pick_device(args.tiny)
    batch = args.batch_size or (16 if args.tiny else 1024)
    n_images, size = (256, 16) if args.tiny else (16384, 96)

    model = ConvNet().to(device, memory_format=torch.channels_last).eval()
    images = torch.randint(0, 256, (n_images, 3, size, size), dtype=torch.uint8, device=device)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    n_batches = n_images // batch
    preds = torch.empty(n_batches, batch, dtype=torch.long, device=device)
    confidence = torch.empty(n_batches, device=device)

    bench = StepBench("control_inference", variant_name(args), device, batch, args.steps)
    with torch.inference_mode(), torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        for step in range(args.steps):
            b = step % n_batches
            x = ((images[b * batch:(b + 1) * batch].float() - mean) / std).contiguous(
                memory_format=torch.channels_last)
            conf, pred = model(x).float().softmax(dim=1).max(dim=1)
            preds[b] = pred
            confidence[b] = conf.mean()
            bench.step()
    bench.finish()
    print(f"mean confidence {confidence.mean().item():.4f}, class 0 share {(preds == 0).float().mean().item():.4f}")


if __name__ == "__main__":
    main()
