"""Planted problem: a periodic cost (`async_checkpoint`). A checkpoint saved synchronously every 25 steps.

ResNet-50 (~25.6M parameters) trained the tuned way (bf16 autocast, channels_last, cudnn.benchmark,
fused AdamW, batch 128 at 224x224, data on the GPU) that saves {model, optimizer, step} with `torch.save`
every 25 steps, the way most training scripts do: the loop stops while every CUDA tensor of the state
(~310 MB with AdamW's two moments) is copied to pageable host memory, pickled and written to disk. A
10-step window between two saves never sees it; the run pays it every 25 steps.

--fix async_checkpoint: the state is copied once into pinned host buffers (non_blocking, one
synchronize) and written by a background thread while training goes on; the next save waits for the
previous write if it has not finished.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
from typing import Any

import torch
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from _models import resnet50

SAVE_EVERY = 25


class AsyncCheckpointer:
    """Copy the state to reused pinned buffers, then torch.save it from a background thread."""

    def __init__(self) -> None:
        self.buffers: dict[str, torch.Tensor] = {}
        self.thread: threading.Thread | None = None

    def _to_host(self, obj: Any, key: str) -> Any:
        if isinstance(obj, torch.Tensor):
            buf = self.buffers.get(key)
            if buf is None or buf.shape != obj.shape or buf.dtype != obj.dtype:
                buf = torch.empty(obj.shape, dtype=obj.dtype, pin_memory=obj.is_cuda)
                self.buffers[key] = buf
            buf.copy_(obj, non_blocking=True)
            return buf
        if isinstance(obj, dict):
            return {k: self._to_host(v, f"{key}/{k}") for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._to_host(v, f"{key}/{i}") for i, v in enumerate(obj))
        return obj

    def save(self, state: dict[str, Any], path: str) -> None:
        if self.thread is not None:
            self.thread.join()  # the previous write must finish before its buffers are reused
        host = self._to_host(state, "")
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.thread = threading.Thread(target=torch.save, args=(host, path), daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.thread is not None:
            self.thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["async_checkpoint"], steps=400)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    torch.backends.cudnn.benchmark = True
    batch = args.batch_size or (2 if args.tiny else 128)
    size = 32 if args.tiny else 224
    model = resnet50(tiny=args.tiny).to(device, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device.type == "cuda")
    n_batches = 4
    images = [torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=torch.channels_last)
              for _ in range(n_batches)]
    labels = torch.randint(0, 1000, (n_batches, batch), device=device)
    out_dir = tempfile.mkdtemp(prefix="ckpt-")
    path = os.path.join(out_dir, "ckpt.pt")
    checkpointer = AsyncCheckpointer() if "async_checkpoint" in fixes else None

    bench = StepBench("checkpoint_every_n", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images[step % n_batches]), labels[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % SAVE_EVERY == 0:
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step + 1}
            if checkpointer is None:
                torch.save(state, path)
            else:
                checkpointer.save(state, path)
        bench.step()
    if checkpointer is not None:
        checkpointer.close()
    bench.finish()


if __name__ == "__main__":
    main()
