"""Fixture (synthetic): a training loop whose neighbouring lines hold credentials, as real scripts do
(a token literal, a database URL with a password), and that reports what it was given: its sys.argv
and whether gpuadvisor's real-argv variable reached it, to the file $SECRETS_MARKER, then, with
--hold S, sleeps S seconds (the test kills gpuadvisor meanwhile)."""

import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

hub_token = "hf_ZZsnippetSECRETzzzzzzzzzzzzzzz"
loader = DataLoader(TensorDataset(torch.randn(256, 4), torch.randn(256, 1)), batch_size=8)
DB_URL = "postgresql://trainer:SnippetPassw0rd@db.internal:5432/metrics"
model = torch.nn.Linear(4, 1)
api_key = "SnippetApiKeyValue123"
opt = torch.optim.SGD(model.parameters(), lr=0.01)
password: str = "SnippetTypedPassword"

marker = os.environ.get("SECRETS_MARKER")
if marker:
    with open(marker, "w") as fh:
        json.dump({"argv": sys.argv, "env": "GPUADVISOR_REAL_ARGV" in os.environ}, fh)
if "--hold" in sys.argv:
    time.sleep(float(sys.argv[sys.argv.index("--hold") + 1]))
for step, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step >= 24:
        break
