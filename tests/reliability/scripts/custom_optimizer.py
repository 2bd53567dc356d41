"""SYNTHETIC fixture: training with a hand-written optimizer (not a torch.optim.Optimizer), no
DataLoader: nothing calls torch's optimizer.step()."""

import torch


class HandSGD:
    def __init__(self, params, lr):
        self.params = list(params)
        self.lr = lr

    @torch.no_grad()
    def step(self):
        for p in self.params:
            p -= self.lr * p.grad

    def zero_grad(self):
        for p in self.params:
            p.grad = None


model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = HandSGD(model.parameters(), lr=0.01)
for _ in range(30):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained", flush=True)
