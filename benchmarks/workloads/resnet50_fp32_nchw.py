"""Planted problem: kernel_efficiency, two remedies (`bf16_autocast`, `channels_last`). ResNet-50 at defaults.

torchvision's ResNet-50 trained the way the common ImageNet recipes start out: an FP32 model in NCHW
memory format, cuDNN's default TF32 convolutions (so the convolutions already run on tensor cores),
cudnn.benchmark on, SGD with momentum, batch 128 at 224x224, data already on the GPU (no input pipeline
in the way). The GPU is busy all the time, but a large share of it is not convolution math: cuDNN runs
its fastest kernels in NHWC and wraps them in nchwToNhwc/nhwcToNchw transposes, and BatchNorm/ReLU/add
kernels move FP32 bytes.

--fix bf16_autocast: bf16 autocast around forward + loss (on its own it can gain little: the transposes
stay and the NCHW bf16 kernels are not much faster).
--fix channels_last: model and inputs in channels_last (no transposes; on its own with TF32 a modest gain).
--fixed: both (the pair is where the gain is: NHWC bf16 tensor-core kernels, half the bytes).
"""

from __future__ import annotations

import argparse
import contextlib

import torch
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from _models import resnet50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["bf16_autocast", "channels_last"], steps=60)
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

    bench = StepBench("resnet50_fp32_nchw", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        x = images[step % n_batches].contiguous(memory_format=fmt)
        y = labels[step % n_batches]
        amp = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if "bf16_autocast" in fixes
               else contextlib.nullcontext())
        with amp:
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
