"""Per-sequence decode state (spec §5): one entry per layer, all with the same small protocol.

- `KDAState`: short-conv tails (last K−1 projected inputs of q, k, v) and the recurrent state
  S [B, H, K, V] in fp32. Cannot be trimmed: snapshots are taken at turn boundaries instead.
- `MLACache`: the 576-wide latent (normalised c_kv + shared k_pe) per token.
- `GQACache`: post-RoPE K and V per token.

Every entry exposes `state()` / `load(state)` (a flat dict of tensors), `nbytes`, `trimmable`
and, where it can, `trim(n)`. Attention caches live in `GrowBuffer`s, which can spill to a
memory-mapped file once a RAM budget is spent (`Cache.offload_dir`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch


class GrowBuffer:
    """A [B, T, ...] tensor that grows along T with amortised O(1) appends.

    With `spill_dir` set, storage is a file-backed tensor (`torch.from_file`), so the OS pages it
    out of RAM as needed; the file is deleted when the buffer is.
    """

    def __init__(self, spill_dir: str | None = None) -> None:
        self.data: torch.Tensor | None = None
        self.length = 0
        self.spill_dir = spill_dir
        self._path: str | None = None

    def _alloc(self, like: torch.Tensor, cap: int) -> torch.Tensor:
        shape = (like.shape[0], cap, *like.shape[2:])
        if self.spill_dir is None:
            return torch.empty(shape, dtype=like.dtype, device=like.device)
        fd, path = tempfile.mkstemp(prefix="k3cache-", suffix=".bin", dir=self.spill_dir)
        os.close(fd)
        numel = 1
        for s in shape:
            numel *= s
        t = torch.from_file(path, shared=True, size=numel, dtype=like.dtype).view(shape)
        self._drop_file()
        self._path = path
        return t

    def _drop_file(self) -> None:
        if self._path:
            try:
                os.unlink(self._path)
            except OSError:
                pass
            self._path = None

    def __del__(self) -> None:
        self._drop_file()

    def append(self, x: torch.Tensor) -> torch.Tensor:
        """Append x [B, t, ...]; returns the whole valid view [B, T, ...]."""
        t = x.shape[1]
        need = self.length + t
        if self.data is None or need > self.data.shape[1] or self.data.dtype != x.dtype:
            cap = max(need, 2 * (self.data.shape[1] if self.data is not None else 0), 64)
            new = self._alloc(x, cap)
            if self.data is not None and self.length:
                new[:, : self.length] = self.data[:, : self.length]
            self.data = new
        self.data[:, self.length : need] = x
        self.length = need
        return self.data[:, :need]

    def view(self) -> torch.Tensor | None:
        return None if self.data is None else self.data[:, : self.length]

    def spill(self, spill_dir: str) -> None:
        """Move current and future storage to a file in `spill_dir`."""
        self.spill_dir = spill_dir
        if self.data is not None and not self.on_disk:
            new = self._alloc(self.data, self.data.shape[1])
            new[:, : self.length] = self.data[:, : self.length]
            self.data = new

    def trim(self, n: int) -> None:
        self.length = min(self.length, n)

    @property
    def nbytes(self) -> int:
        v = self.view()
        return 0 if v is None else v.numel() * v.element_size()

    @property
    def on_disk(self) -> bool:
        return self._path is not None


@dataclass
class KDAState:
    conv: list[torch.Tensor | None] = field(default_factory=lambda: [None, None, None])
    """q, k, v conv tails [B, K−1, C] (pre-conv inputs)."""
    recurrent: torch.Tensor | None = None
    """S [B, H, K, V], fp32."""
    trimmable = False

    def state(self) -> dict[str, torch.Tensor]:
        out = {f"conv{i}": c for i, c in enumerate(self.conv) if c is not None}
        if self.recurrent is not None:
            out["recurrent"] = self.recurrent
        return out

    def load(self, st: dict[str, torch.Tensor]) -> None:
        self.conv = [st.get(f"conv{i}") for i in range(3)]
        self.recurrent = st.get("recurrent")

    def copy(self) -> KDAState:
        return KDAState(
            [None if c is None else c.clone() for c in self.conv],
            None if self.recurrent is None else self.recurrent.clone(),
        )

    def to(self, device: str | torch.device) -> None:
        self.conv = [None if c is None else c.to(device) for c in self.conv]
        if self.recurrent is not None:
            self.recurrent = self.recurrent.to(device)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.state().values())


class _AttnCache:
    names: tuple[str, ...] = ()
    trimmable = True

    def __init__(self, spill_dir: str | None = None) -> None:
        self.bufs = {n: GrowBuffer(spill_dir) for n in self.names}

    @property
    def length(self) -> int:
        return next(iter(self.bufs.values())).length

    def state(self) -> dict[str, torch.Tensor]:
        return {n: b.view().contiguous() for n, b in self.bufs.items() if b.view() is not None}

    def load(self, st: dict[str, torch.Tensor]) -> None:
        for n, b in self.bufs.items():
            b.data, b.length = None, 0
            if n in st:
                b.append(st[n])

    def trim(self, n: int) -> None:
        for b in self.bufs.values():
            b.trim(n)

    def spill(self, spill_dir: str) -> None:
        for b in self.bufs.values():
            b.spill(spill_dir)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.bufs.values())

    @property
    def on_disk(self) -> bool:
        return any(b.on_disk for b in self.bufs.values())


class MLACache(_AttnCache):
    """`latent` [B, T, kv_lora_rank] (after kv_a_layernorm) and `k_pe` [B, T, rope_dim]."""

    names = ("latent", "k_pe")


class GQACache(_AttnCache):
    """`k`, `v` [B, T, kv_heads, head_dim]; k after RoPE."""

    names = ("k", "v")


class Cache:
    """All layers' state for one sequence, plus how many tokens it covers.

    `ram_budget_bytes`: once the attention caches hold more than this, new growth goes to
    memory-mapped files in `offload_dir` (a temp dir by default).
    """

    def __init__(
        self,
        kinds: list[str],
        *,
        ram_budget_bytes: int | None = None,
        offload_dir: str | Path | None = None,
    ) -> None:
        self.kinds = kinds
        self.layers = [
            KDAState() if k == "kda" else MLACache() if k == "mla" else GQACache() for k in kinds
        ]
        self.seen = 0
        self.ram_budget_bytes = ram_budget_bytes
        self.offload_dir = str(offload_dir) if offload_dir else None

    def maybe_spill(self) -> None:
        """Switch attention buffers to file-backed storage once the RAM budget is exceeded."""
        if self.ram_budget_bytes is None or self.attention_bytes <= self.ram_budget_bytes:
            return
        if self.offload_dir is None:
            self.offload_dir = tempfile.mkdtemp(prefix="k3chat-kv-")
        os.makedirs(self.offload_dir, exist_ok=True)
        for layer in self.layers:
            if isinstance(layer, _AttnCache):
                layer.spill(self.offload_dir)

    @property
    def attention_bytes(self) -> int:
        return sum(la.nbytes for la in self.layers if isinstance(la, _AttnCache))

    @property
    def trimmable(self) -> bool:
        return all(la.trimmable for la in self.layers)

    def trim(self, n: int) -> None:
        if not self.trimmable:
            raise ValueError("a cache with KDA state cannot be trimmed")
        for la in self.layers:
            la.trim(n)
        self.seen = min(self.seen, n)

    def recurrent_copy(self) -> list[KDAState | None]:
        """Copy of the untrimmable (KDA) parts, to restore a turn boundary later."""
        return [la.copy() if isinstance(la, KDAState) else None for la in self.layers]

    def restore(self, n: int, kda: list[KDAState | None]) -> None:
        """Go back to covering the first n tokens, with KDA state saved at exactly n tokens."""
        for i, la in enumerate(self.layers):
            if isinstance(la, KDAState):
                st = kda[i]
                self.layers[i] = st.copy() if st is not None else KDAState()
            else:
                la.trim(n)
        self.seen = n

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep only these batch rows of every layer's state, in this order: a batched decode
        drops its finished sequences so later steps stop computing them."""
        for la in self.layers:
            la.load({k: v.index_select(0, rows) for k, v in la.state().items()})

    def park_recurrent(self, device: str = "cpu") -> None:
        """Move KDA state to `device` (e.g. CPU between turns when the model runs on GPU)."""
        for la in self.layers:
            if isinstance(la, KDAState):
                la.to(device)

    def state_dict(self) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for i, la in enumerate(self.layers):
            for k, v in la.state().items():
                out[f"layers.{i}.{k}"] = v.detach().cpu().contiguous()
        return out

    def load_state_dict(
        self, st: dict[str, torch.Tensor], seen: int, device: str | torch.device = "cpu"
    ) -> None:
        for i, la in enumerate(self.layers):
            prefix = f"layers.{i}."
            la.load({k[len(prefix) :]: v.to(device) for k, v in st.items() if k.startswith(prefix)})
        self.seen = seen

    def memory_report(self) -> dict[str, int]:
        ram = disk = 0
        for la in self.layers:
            if isinstance(la, _AttnCache) and la.on_disk:
                disk += la.nbytes
            else:
                ram += la.nbytes
        return {
            "cache_ram": ram,
            "cache_disk": disk,
            "kda_state": sum(la.nbytes for la in self.layers if isinstance(la, KDAState)),
        }
