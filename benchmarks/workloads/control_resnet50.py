"""Control (must stay quiet): ResNet-50 trained the tuned way.

torchvision's ResNet-50 layout in channels_last with bf16 autocast, cudnn.benchmark, batch 128 at
224x224, data already on the GPU, SGD with momentum (foreach), no host syncs in the step.

--fixed is accepted for symmetry with the planted workloads and changes nothing.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _common import StepBench, add_workload_args, pick_device, variant_name
from _models import resnet50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=[], steps=60)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 128)
    size = 32 if args.tiny else 224
    torch.backends.cudnn.benchmark = True

    model = resnet50(tiny=args.tiny).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, foreach=True)
    n_batches = 4
    images = [torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=torch.channels_last)
              for _ in range(n_batches)]
    labels = torch.randint(0, 1000, (n_batches, batch), device=device)

    bench = StepBench("control_resnet50", variant_name(args), device, batch, args.steps)
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
