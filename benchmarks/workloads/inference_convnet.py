"""Planted problems: small_batch (fix `larger_batch`) and host_sync (fix `remove_host_syncs`). Inference, CNN.

A batch-inference loop, no training: a small convnet (4 stride-2 3x3 convs 3 -> 32 -> 64 -> 128 -> 256
with BatchNorm and ReLU, global pooling, a 100-class head; eval mode) scores an evaluation set of 8,192
RGB 64x64 images already on the GPU (uint8, normalized per batch), under `torch.inference_mode()`, at
batch 8. After each batch the predicted classes are copied back with `.cpu()` and appended to a Python
list, and the batch's mean confidence is read with `.item()`. No optimizer, no DataLoader: a step is
one batch. (Step detection for such a script is gpuadvisor issue 17.)

Why it is slow on an H200: a batch of 8 is ~15 kernels of a few microseconds (8 images are ~0.2 GFLOP),
paced by ~150-250 us of host work per batch; and the `.cpu()` and `.item()` make the host wait for
each batch's kernels before it launches the next, so host and GPU time add up.

--fix larger_batch: batch 512 (the same kernels carry 64x more images; the GPU's time per batch grows
far less at this size).
--fix remove_host_syncs: predictions and confidences stay on the GPU (lists of GPU tensors) and are
copied back once, after the loop.
--fixed: both.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name


def conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class SmallConvNet(nn.Module):
    def __init__(self, num_classes: int = 100) -> None:
        super().__init__()
        self.features = nn.Sequential(conv_bn(3, 32), conv_bn(32, 64), conv_bn(64, 128), conv_bn(128, 256))
        self.head = nn.Linear(256, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["larger_batch", "remove_host_syncs"], steps=20000)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    larger = 64 if args.tiny else 512
    batch = args.batch_size or (larger if "larger_batch" in fixes else (2 if args.tiny else 8))
    n_images, size = (256, 16) if args.tiny else (8192, 64)

    model = SmallConvNet().to(device).eval()
    images = torch.randint(0, 256, (n_images, 3, size, size), dtype=torch.uint8, device=device)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255

    keep_on_gpu = "remove_host_syncs" in fixes
    predictions: list[torch.Tensor] = []
    confidences: list[float] = []
    gpu_confidences: list[torch.Tensor] = []

    bench = StepBench("inference_convnet", variant_name(args), device, batch, args.steps)
    starts = range(0, n_images - batch + 1, batch)
    with torch.inference_mode():
        for step in range(args.steps):
            start = starts[step % len(starts)]
            x = (images[start:start + batch].float() - mean) / std
            probs = model(x).softmax(dim=1)
            conf, pred = probs.max(dim=1)
            if keep_on_gpu:
                predictions.append(pred)
                gpu_confidences.append(conf.mean())
            else:
                predictions.append(pred.cpu())
                confidences.append(conf.mean().item())
            bench.step()
    bench.finish()
    if keep_on_gpu:  # read once, after the loop
        predictions = [torch.cat(predictions).cpu()]
        confidences = torch.stack(gpu_confidences).tolist()
    print(f"scored {sum(len(p) for p in predictions)} images, mean confidence {sum(confidences) / len(confidences):.4f}")


if __name__ == "__main__":
    main()
