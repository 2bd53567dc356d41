"""Planted problems: launch_overhead (fix `fused_optimizer`) and fp32_math (fix `bf16_autocast`). A UNet.

DDPM-style denoising-diffusion training of a small UNet on 64x64 RGB images: channels 64-128-256,
two residual blocks per resolution (GroupNorm(32), SiLU, 3x3 convs, a timestep-embedding projection),
self-attention at 16x16, skip concatenations on the way up; 246 parameter tensors, 16M parameters.
Each step samples timesteps and noise, noises the images with the cosine schedule and regresses the
noise (MSE); batch 32, images resident on the GPU. Two settings are as an old codebase left them:
`AdamW(..., foreach=False)` (the per-parameter implementation) and no mixed precision (FP32 everywhere;
convolutions use TF32, PyTorch's default for cuDNN, the attention matmuls and linears strict FP32).

Why it is slow on an H200: forward and backward are ~10-15 ms of GPU work in FP32 (convolutions in
TF32 and memory-bound GroupNorm/SiLU passes over 32x64x64x64 activations), and then the optimizer:
246 tensors x ~10 small kernels each, issued one by one from Python (~60-100 us of host time per
tensor): ~15-20 ms per step during which the GPU mostly waits for launches.

--fix fused_optimizer: `AdamW(..., fused=True)`: one multi-tensor kernel launch for all parameters.
--fix bf16_autocast: bf16 autocast around the forward and the loss (weights and optimizer stay FP32):
convolutions and matmuls on bf16 tensor cores, half the bytes in the normalization passes.
--fixed: both.
"""

from __future__ import annotations

import argparse
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10_000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=1)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, tdim: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(32, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class SelfAttention(nn.Module):
    def __init__(self, channels: int, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(32, channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.proj = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, hgt, wid = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, hgt * wid).unbind(1)
        attn = torch.softmax(q.transpose(-1, -2) @ k / math.sqrt(c // self.heads), dim=-1)  # [b, h, hw, hw]
        out = (v @ attn.transpose(-1, -2)).reshape(b, c, hgt, wid)
        return x + self.proj(out)


class UNet(nn.Module):
    def __init__(self, ch: tuple[int, ...] = (64, 128, 256), blocks: int = 2, attn_res: int = 16,
                 image: int = 64) -> None:
        super().__init__()
        tdim = 4 * ch[0]
        self.ch0 = ch[0]
        self.time_mlp = nn.Sequential(nn.Linear(ch[0], tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.stem = nn.Conv2d(3, ch[0], 3, padding=1)
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        skips, cur, res = [ch[0]], ch[0], image
        for i, c in enumerate(ch):
            for _ in range(blocks):
                self.down.append(nn.ModuleList([ResBlock(cur, c, tdim),
                                                SelfAttention(c) if res == attn_res else nn.Identity()]))
                cur = c
                skips.append(cur)
            if i < len(ch) - 1:
                self.downsample.append(nn.Conv2d(cur, cur, 3, stride=2, padding=1))
                skips.append(cur)
                res //= 2
        self.mid = nn.ModuleList([ResBlock(cur, cur, tdim), SelfAttention(cur), ResBlock(cur, cur, tdim)])
        self.up = nn.ModuleList()
        self.upsample = nn.ModuleList()
        for i, c in reversed(list(enumerate(ch))):
            for _ in range(blocks + 1):
                self.up.append(nn.ModuleList([ResBlock(cur + skips.pop(), c, tdim),
                                              SelfAttention(c) if res == attn_res else nn.Identity()]))
                cur = c
            if i > 0:
                self.upsample.append(nn.Conv2d(cur, cur, 3, padding=1))
                res *= 2
        self.out = nn.Sequential(nn.GroupNorm(32, cur), nn.SiLU(), nn.Conv2d(cur, 3, 3, padding=1))
        self.blocks, self.levels = blocks, len(ch)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.time_mlp(timestep_embedding(t, self.ch0))
        h = self.stem(x)
        hs = [h]
        down = iter(self.down)
        for i in range(self.levels):
            for _ in range(self.blocks):
                res, attn = next(down)
                h = attn(res(h, temb))
                hs.append(h)
            if i < self.levels - 1:
                h = self.downsample[i](h)
                hs.append(h)
        h = self.mid[2](self.mid[1](self.mid[0](h, temb)), temb)
        up = iter(self.up)
        for i in range(self.levels):
            for _ in range(self.blocks + 1):
                res, attn = next(up)
                h = attn(res(torch.cat([h, hs.pop()], dim=1), temb))
            if i < self.levels - 1:
                h = self.upsample[i](F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.out(h)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["fused_optimizer", "bf16_autocast"], steps=500)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 32)
    if args.tiny:
        model = UNet(ch=(32, 64), blocks=1, attn_res=8, image=16).to(device)
        image, n_images = 16, 64
    else:
        model = UNet().to(device)
        image, n_images = 64, 2048
    if "fused_optimizer" in fixes:
        opt = torch.optim.AdamW(model.parameters(), lr=2e-4, fused=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=2e-4, foreach=False)
    images = torch.rand(n_images, 3, image, image, device=device) * 2 - 1
    steps_t = 1000
    alphas_bar = torch.cos((torch.arange(steps_t + 1, device=device) / steps_t + 0.008) / 1.008 * math.pi / 2) ** 2
    alphas_bar = (alphas_bar / alphas_bar[0])[1:].clamp(1e-5, 1.0)

    bench = StepBench("unet_diffusion", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        start = (step * batch) % (n_images - batch)
        x0 = images[start:start + batch]
        t = torch.randint(0, steps_t, (batch,), device=device)
        noise = torch.randn_like(x0)
        ab = alphas_bar[t].view(-1, 1, 1, 1)
        xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
        amp = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if "bf16_autocast" in fixes
               else contextlib.nullcontext())
        with amp:
            loss = F.mse_loss(model(xt, t).float(), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
