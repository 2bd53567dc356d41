"""Fixture (synthetic): a model whose inputs are not all images, for the channels_last and autocast
injections: a Conv2d on a 4-D image, a Conv3d (5-D weight) on a clip, a Linear on 2-D features and a
4-D integer mask. Optionally the script runs its own autocast (fp16) around the forward, and
DataLoader workers (for persistent_workers / prefetch_factor).

--dump FILE  at step 3, what the forward saw (memory formats, dtypes) as JSON
"""

import argparse
import json

import torch
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--own-autocast", action="store_true")
p.add_argument("--workers", type=int, default=0)
p.add_argument("--dump", default=None)
args = p.parse_args()
seen: dict = {}


class Data(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        return torch.ones(3, 8, 8), torch.ones(2, 3, 4, 4, 4), torch.ones(5), torch.zeros(1, 2, 2, 2, dtype=torch.long)


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv2 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.conv3 = torch.nn.Conv3d(3, 2, 3, padding=1)
        self.fc = torch.nn.Linear(5, 1)

    def forward(self, image, clip, features, mask):
        b = image.shape[0]
        seen["image_channels_last"] = image.is_contiguous(memory_format=torch.channels_last)
        seen["clip_dim"] = clip.dim()
        seen["mask_dtype"] = str(mask.dtype)
        seen["mask_contiguous"] = mask.is_contiguous()
        seen["conv3_weight_dim"] = self.conv3.weight.dim()
        out = self.fc(features)
        seen["fc_out_dtype"] = str(out.dtype)
        return self.conv2(image).mean() + self.conv3(clip.view(-1, 3, 4, 4, 4)).mean() + out.float().sum() / b


loader = DataLoader(Data(), batch_size=4, num_workers=args.workers)
model = Mixed()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while step < args.steps:
    for image, clip, features, mask in loader:
        if args.own_autocast:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(image, clip, features, mask)
        else:
            loss = model(image, clip, features, mask)
        opt.zero_grad()
        loss.float().backward()
        opt.step()
        step += 1
        if args.dump and step == 3:
            seen["persistent_workers"] = loader.persistent_workers
            seen["prefetch_factor"] = loader.prefetch_factor
            seen["num_workers"] = loader.num_workers
            with open(args.dump, "w") as fh:
                json.dump(seen, fh, sort_keys=True)
        if step >= args.steps:
            break
print("finished", step, flush=True)
