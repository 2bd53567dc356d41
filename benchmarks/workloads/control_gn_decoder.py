"""Control (must stay quiet): a GroupNorm/interpolate VAE-style decoder in its fastest layout.

A decoder from a [B, 8, 32, 32] latent to 256x256 images: GroupNorm residual blocks (3x3 conv,
GroupNorm(32), SiLU) and nearest-neighbour `F.interpolate` upsampling, 512 -> 64 channels, batch 16,
bf16 autocast, cudnn.benchmark, fused AdamW, data on the GPU, no host reads in the loop. The layout is
NCHW (`LAYOUT`): for GroupNorm and upsampling in bf16 the layout that measured fastest (issue 41; the
`channels_last` probe measures the other one beside it, benchmarks/nhwc_table.py each family alone).
channels_last advice here must not be high or medium.

--fixed is accepted for symmetry with the planted workloads and changes nothing.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _common import StepBench, add_workload_args, pick_device, variant_name
from _models import GNDecoder

LAYOUT = "nchw"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=[], steps=60)
    parser.add_argument("--layout", choices=["nchw", "channels_last"], default=LAYOUT,
                        help="probe: the other memory format")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 16)
    latent, width, size = (4, 8, 4) if args.tiny else (8, 64, 32)
    torch.backends.cudnn.benchmark = True
    fmt = torch.channels_last if args.layout == "channels_last" else torch.contiguous_format

    model = GNDecoder(latent, width).to(device, memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    n_batches = 4
    z = [torch.randn(batch, latent, size, size, device=device).contiguous(memory_format=fmt) for _ in range(n_batches)]
    images = [torch.randn(batch, 3, size * 8, size * 8, device=device).contiguous(memory_format=fmt)
              for _ in range(n_batches)]

    bench = StepBench("control_gn_decoder", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.mse_loss(model(z[step % n_batches]), images[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
