"""Planted problems: small_batch (fix `larger_batch`) and host_sync (fix `remove_host_syncs`). A CNN.

The PyTorch "Training a Classifier" tutorial (CIFAR-10), as written there: its `Net` (two 5x5 convs,
three linears, 62k parameters), `batch_size = 4`, a DataLoader with `shuffle=True, num_workers=2`,
`SGD(lr=0.001, momentum=0.9)`, the batch moved with `data[0].to(device)`, and `running_loss +=
loss.item()` after every step. The data set is synthetic (no download): CIFAR-sized float32 images,
already normalized as `ToTensor()` + `Normalize((0.5,) * 3, (0.5,) * 3)` would leave them, held in memory.

Why it is slow on an H200: a step is ~40 kernels of a few microseconds each (4 images through a 62k
parameter net is nanoseconds of math) paced by the host (~1 ms of Python, launches and the DataLoader
hand-off per step), so the GPU idles >90% of the step; and the `.item()` waits for the whole step's
kernels before the next step can be queued, adding the GPU's own time to the host's.

--fix larger_batch: batch 256 with the learning rate scaled linearly (0.001 * 256 / 4): the same ~40
launches carry 64x more images (the GPU's time per step grows far less than 64x at this size).
--fix remove_host_syncs: the running loss is accumulated on the GPU and read once per print interval
(every 2000 steps, as the tutorial prints).
--fixed: both.
--num-workers 8 (a probe, not a fix): four times the tutorial's DataLoader workers, to measure whether
the loop's wait in `__next__` (taking over batches from the workers) shrinks with more of them.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from torch.utils.data import DataLoader, Dataset

PRINT_EVERY = 2000
BASE_BATCH, BASE_LR = 4, 0.001


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)  # flatten all dimensions except batch
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


class NormalizedCifar(Dataset[tuple[torch.Tensor, int]]):
    """A pool of CIFAR-sized normalized images, read cyclically up to `length` samples (one epoch)."""

    def __init__(self, pool: int, length: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.rand(pool, 3, 32, 32, generator=g).sub_(0.5).div_(0.5)
        self.labels = torch.randint(0, 10, (pool,), generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        i = index % len(self.images)
        return self.images[i], int(self.labels[i])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["larger_batch", "remove_host_syncs"], steps=6000)
    parser.add_argument("--num-workers", type=int, default=2,
                        help="DataLoader workers (the tutorial's 2; a probe measures 8)")
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    larger = 32 if args.tiny else 256
    batch_size = args.batch_size or (larger if "larger_batch" in fixes else BASE_BATCH)
    lr = BASE_LR * batch_size / BASE_BATCH  # linear scaling rule

    # One long epoch: the DataLoader starts its two workers once.
    trainset = NormalizedCifar(512 if args.tiny else 10_000, batch_size * args.steps)
    trainloader = DataLoader(trainset, batch_size=batch_size, shuffle=True, num_workers=args.num_workers)

    net = Net().to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=lr, momentum=0.9)

    bench = StepBench("tutorial_cnn", variant_name(args), device, batch_size, args.steps)
    running_loss = 0.0
    running_loss_gpu = torch.zeros((), device=device)
    for i, data in enumerate(trainloader, 0):
        # get the inputs; data is a list of [inputs, labels]
        inputs, labels = data[0].to(device), data[1].to(device)

        # zero the parameter gradients
        optimizer.zero_grad()

        # forward + backward + optimize
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()

        # print statistics
        if "remove_host_syncs" in fixes:
            running_loss_gpu += loss.detach()
            if i % PRINT_EVERY == PRINT_EVERY - 1:
                print(f"[{i + 1:5d}] loss: {running_loss_gpu.item() / PRINT_EVERY:.3f}")
                running_loss_gpu.zero_()
        else:
            running_loss += loss.item()
            if i % PRINT_EVERY == PRINT_EVERY - 1:
                print(f"[{i + 1:5d}] loss: {running_loss / PRINT_EVERY:.3f}")
                running_loss = 0.0
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
