"""Control (must stay quiet): a well-tuned torch.compile'd vision transformer.

The ViT of compiled_vit.py, imported from it (224x224 images, 16x16 patches, width 384, 6 heads, 6 blocks, 11.4M
parameters) compiled with `torch.compile(model)` and trained at batch 256 under bf16 autocast with
TF32 allowed (`set_float32_matmul_precision("high")`) for what stays FP32, fused AdamW, images resident
on the GPU (uint8, normalized per step), and the loss read once every 100 steps: tensor-core GEMMs,
fused elementwise kernels, ~3.5 TFLOP per step, no host waits.

On a CPU (`--tiny`) the model is compiled with `backend="eager"` (Dynamo only, no C++ compiler).
--fixed is accepted for symmetry with the planted workloads and changes nothing.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _common import StepBench, add_workload_args, pick_device, variant_name
from compiled_vit import VisionTransformer  # the same model as the planted workload

LOG_EVERY = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=[], steps=300)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_float32_matmul_precision("high")
    device = pick_device(args.tiny)
    batch = args.batch_size or (4 if args.tiny else 256)
    image, patch, dim, depth, heads = (32, 8, 32, 2, 4) if args.tiny else (224, 16, 384, 6, 6)

    model = VisionTransformer(image, patch, dim, depth, heads, 1000).to(device)
    compiled = torch.compile(model) if device.type == "cuda" else torch.compile(model, backend="eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device.type == "cuda")
    n_batches = 4
    images = torch.randint(0, 256, (n_batches, batch, 3, image, image), dtype=torch.uint8, device=device)
    labels = torch.randint(0, 1000, (n_batches, batch), device=device)

    loss_sum = torch.zeros((), device=device)
    bench = StepBench("control_compiled", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        x = images[step % n_batches].float().div_(127.5).sub_(1.0)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(compiled(x), labels[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_sum += loss.detach()
        if (step + 1) % LOG_EVERY == 0:
            print(f"step {step + 1} loss {loss_sum.item() / LOG_EVERY:.4f}", flush=True)  # the only sync
            loss_sum.zero_()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
