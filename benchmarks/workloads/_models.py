"""Model definitions shared by several benchmark workloads (kept out of the scripts so each script reads
like the user's training loop around a model it imports, as real scripts import torchvision or timm).

- `resnet50()`: torchvision's ResNet-50 layout (Bottleneck blocks [3, 4, 6, 3], BatchNorm, ReLU), written
  out here because the CPU test machine has no torchvision.
- `GPT`: a GPT-2-style decoder whose attention is either hand-written (`attention="manual"`: q @ k^T,
  scale, masked_fill, softmax in float32, @ v, the way many research codebases and tutorials write it) or
  `F.scaled_dot_product_attention` (`attention="sdpa"`); `checkpoint=True` runs every block under
  `torch.utils.checkpoint` (activation checkpointing).
- `GNUNet`, `GNDecoder`: conv nets of GroupNorm blocks with `F.interpolate` upsampling (the op families
  whose channels_last speed issue 41 measures), a UNet and a VAE-style decoder.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

# --- ResNet-50 ------------------------------------------------------------------------------------------

class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), num_classes: int = 1000, width: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        blocks: list[nn.Module] = []
        cin = width
        for i, n in enumerate(layers):
            w = width * 2**i
            for j in range(n):
                blocks.append(Bottleneck(cin, w, stride=2 if (j == 0 and i > 0) else 1))
                cin = w * Bottleneck.expansion
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50(num_classes: int = 1000, tiny: bool = False) -> ResNet:
    """ResNet-50 (tiny: one block per stage and width 8, for CPU smoke tests)."""
    if tiny:
        return ResNet((1, 1, 1, 1), num_classes, width=8)
    return ResNet((3, 4, 6, 3), num_classes)


# --- GPT ------------------------------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, seq: int, attention: str) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.attention = attention
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)).view(1, 1, seq, seq),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
            att = F.softmax(att.float(), dim=-1).to(q.dtype)
            y = att @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, seq: int, attention: str) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, seq, attention)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, d_model: int, n_layers: int, n_heads: int,
                 attention: str = "sdpa", checkpoint: bool = False) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, n_heads, seq, attention) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.tok.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        if not self.checkpoint:
            return self.ln_f(self.blocks(x))
        for block in self.blocks:  # activation checkpointing, as fine-tuning recipes switch it on
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.hidden(idx))


# --- GroupNorm / interpolate conv nets (issue 41: channels_last measured slower on such a net) ---------

def gn_block(cin: int, cout: int, groups: int = 32) -> nn.Sequential:
    """3x3 convolution, GroupNorm, SiLU: the building block of diffusion UNets and VAE decoders."""
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(min(groups, cout), cout), nn.SiLU())


class GNUNet(nn.Module):
    """A UNet of GroupNorm blocks: average-pool downsampling, bilinear `F.interpolate` upsampling and skip
    concatenations (no BatchNorm, no transposed convolutions)."""

    def __init__(self, width: int, levels: int = 4, out: int = 3) -> None:
        super().__init__()
        w = [width * 2**i for i in range(levels)]
        self.inc = gn_block(3, w[0])
        self.downs = nn.ModuleList([nn.Sequential(gn_block(w[i], w[i + 1]), gn_block(w[i + 1], w[i + 1]))
                                    for i in range(levels - 1)])
        self.ups = nn.ModuleList([nn.Sequential(gn_block(w[i + 1] + w[i], w[i]), gn_block(w[i], w[i]))
                                  for i in reversed(range(levels - 1))])
        self.outc = nn.Conv2d(w[0], out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(F.avg_pool2d(skips[-1], 2)))
        x = skips.pop()
        for up in self.ups:
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
            x = up(torch.cat([skips.pop(), x], dim=1))
        return self.outc(x)


class GNDecoder(nn.Module):
    """A VAE-style decoder: a latent [B, C, h, w] through GroupNorm residual blocks and nearest-neighbour
    `F.interpolate` upsampling to an image."""

    def __init__(self, latent: int, width: int, ups: int = 3) -> None:
        super().__init__()
        self.inc = nn.Conv2d(latent, width * 2**ups, 3, padding=1)
        stages = []
        for i in reversed(range(ups)):
            cin, cout = width * 2 ** (i + 1), width * 2**i
            stages.append(nn.ModuleList([gn_block(cin, cout), gn_block(cout, cout)]))
        self.stages = nn.ModuleList(stages)
        self.outc = nn.Sequential(nn.GroupNorm(min(32, width), width), nn.SiLU(), nn.Conv2d(width, 3, 3, padding=1))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.inc(z)
        for first, second in self.stages:
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
            x = first(x)
            x = x + second(x)
        return self.outc(x)
