"""SYNTHETIC fixture: a tiny CPU training loop of 8 steps that takes any command line (as a script
with its own option parser would take a password or a passphrase) and ignores it."""

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(8):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("finished", flush=True)
