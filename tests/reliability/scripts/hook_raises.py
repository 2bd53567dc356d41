"""SYNTHETIC fixture: a DataLoader subclass whose `multiprocessing_context` is computed lazily and raises
when read before the loader is iterated. gpuadvisor's DataLoader hook reads it; the script never
does. Under plain python the script runs to the end."""

import torch
from torch.utils.data import DataLoader, TensorDataset


class LazyContextLoader(DataLoader):
    @property
    def multiprocessing_context(self):
        raise RuntimeError("the context is chosen when iteration starts")

    @multiprocessing_context.setter
    def multiprocessing_context(self, value):
        DataLoader.multiprocessing_context.fset(self, value)


loader = LazyContextLoader(TensorDataset(torch.randn(64, 8)), batch_size=4)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _epoch in range(2):
    for (x,) in loader:
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("done", flush=True)
