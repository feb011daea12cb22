"""Read-ahead of offloaded routed experts (for disk-offloaded MoE checkpoints).

Accelerate loads an offloaded expert synchronously when it is called, so every cold expert
costs a disk read on the critical path. Routing is sticky from one token to the next, so
while layer L runs we ask the kernel (`posix_fadvise(WILLNEED)`, asynchronous) to bring in the
experts layer L+1 used for the previous token. By the time layer L+1's router picks its
experts, most of their bytes are already in the page cache.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections import defaultdict
from pathlib import Path

from torch import nn

_EXPERT = re.compile(r"model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.")


def tensor_byte_ranges(file: str | Path) -> dict[str, tuple[int, int]]:
    """tensor name -> (absolute offset, length) inside a safetensors file."""
    with open(file, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    base = 8 + n
    return {
        k: (base + v["data_offsets"][0], v["data_offsets"][1] - v["data_offsets"][0])
        for k, v in header.items()
        if k != "__metadata__"
    }


class ExpertPrefetcher:
    """Issues WILLNEED hints for layer L+1's recently used experts while layer L runs."""

    def __init__(self, offload_index: dict[str, dict]) -> None:
        self.ranges: dict[tuple[int, int], list[tuple[str, int, int]]] = defaultdict(list)
        headers: dict[str, dict[str, tuple[int, int]]] = {}
        for name, entry in offload_index.items():
            m = _EXPERT.match(name)
            if not m or "safetensors_file" not in entry:
                continue
            file = entry["safetensors_file"]
            if file not in headers:
                headers[file] = tensor_byte_ranges(file)
            off, length = headers[file][entry.get("weight_name", name)]
            self.ranges[(int(m.group(1)), int(m.group(2)))].append((file, off, length))
        self.last_used: dict[int, list[int]] = {}
        self.issued: list[tuple[str, int, int]] = []
        """Every hint given, in order (for tests and stats)."""
        self._fds: dict[str, int] = {}

    def _fd(self, file: str) -> int:
        if file not in self._fds:
            self._fds[file] = os.open(file, os.O_RDONLY)
        return self._fds[file]

    def hint(self, layer: int) -> None:
        for e in self.last_used.get(layer, []):
            for file, off, length in self.ranges.get((layer, e), []):
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(self._fd(file), off, length, os.POSIX_FADV_WILLNEED)
                self.issued.append((file, off, length))

    def attach(self, model: nn.Module) -> None:
        """Hook every decoder layer: before layer L runs, hint L+1; record each router's choice."""
        for i, layer in enumerate(model.model.layers):
            layer.register_forward_pre_hook(lambda mod, args, nxt=i + 1: self.hint(nxt))
            moe = getattr(layer, "block_sparse_moe", None)
            if moe is not None:
                moe.gate.register_forward_hook(lambda mod, args, out, idx=i: self._record(idx, out))

    def _record(self, layer: int, out) -> None:
        ids, _ = out
        self.last_used[layer] = sorted(set(ids.reshape(-1).tolist()))

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:
        self.close()
