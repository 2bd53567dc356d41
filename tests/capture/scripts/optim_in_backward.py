"""The PyTorch tutorial "How to save memory by fusing the optimizer step into the backward pass":
one optimizer per parameter, stepped from `register_post_accumulate_grad_hook` inside backward.

    python optim_in_backward.py [STEPS]
"""

import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer_dict = {p: torch.optim.Adam([p], foreach=False) for p in model.parameters()}


def optimizer_hook(parameter: torch.Tensor) -> None:
    optimizer_dict[parameter].step()
    optimizer_dict[parameter].zero_grad()


for p in model.parameters():
    p.register_post_accumulate_grad_hook(optimizer_hook)

for _ in range(steps):
    model(torch.randn(32, 64)).sum().backward()
print("done")
