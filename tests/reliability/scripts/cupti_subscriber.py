"""SYNTHETIC fixture: a CUDA training loop that holds CUPTI's callback subscription, as another CUPTI
client (Nsight Systems, a vendor agent) does. CUPTI allows one subscriber per process: whoever
subscribes second gets CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39).

    python cupti_subscriber.py [STEPS]

Prints `cupti subscribe rc=N` (0: this script holds the subscription) or `cupti not found`, then
`done` after STEPS optimizer steps.
"""

import ctypes
import glob
import os
import sys

import torch


def _libcupti() -> "ctypes.CDLL | None":
    roots = [os.path.dirname(os.path.dirname(torch.__file__))]  # site-packages: nvidia/cuda_cupti/lib
    roots += ["/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/lib64"]
    names = []
    for root in roots:
        names += glob.glob(os.path.join(root, "nvidia", "*", "lib", "libcupti.so*"))
        names += glob.glob(os.path.join(root, "libcupti.so*"))
    for name in sorted(names):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
noop = CALLBACK(lambda userdata, domain, cbid, data: None)  # kept alive for the process's lifetime

torch.cuda.init()
lib = _libcupti()
if lib is None:
    print("cupti not found", flush=True)
else:
    handle = ctypes.c_void_p()
    rc = lib.cuptiSubscribe(ctypes.byref(handle), noop, None)
    print(f"cupti subscribe rc={rc}", flush=True)

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")
for _ in range(steps):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print("done", flush=True)
