"""Weight deltas: the tensors a distilled k3-smol changes, shipped on top of the teacher build.

A delta is one safetensors file. Its metadata names the format, the KDA layers (1-based, as
config.json lists them) and the tensor-name prefixes it replaces (the attention of those
layers). Tensors are stored as `t::NAME` (as is: fp32 gate/conv/norm parameters, or bf16), or
`q::NAME` int8 with per-row fp32 scales `s::NAME` (symmetric, scale = max|row| / 127).

`apply_delta` rewrites a checkpoint directory in place: the shards that hold replaced tensors
lose them, the delta's tensors go into one extra shard, the index and config.json are updated
and a marker records the delta's sha256, so applying the same delta twice is a no-op.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import torch

from .errors import CheckpointError

FORMAT = "k3chat-delta"
VERSION = "1"
DELTA_SHARD = "model-k3chat-delta.safetensors"
MARKER = "k3chat-delta.json"
INDEX = "model.safetensors.index.json"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _keep_fp32(name: str, t: torch.Tensor) -> bool:
    from .loading import keep_high_precision

    return keep_high_precision(name) or t.dim() < 2


def quantize_int8(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric int8: (q [rows, ...] int8, scale [rows] fp32)."""
    rows = t.float().reshape(t.shape[0], -1)
    scale = rows.abs().amax(1).clamp_min(1e-12) / 127.0
    q = torch.round(rows / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q.reshape(t.shape), scale


def write_delta(
    tensors: dict[str, torch.Tensor],
    path: str | Path,
    *,
    kda_layers: list[int],
    replace_prefixes: list[str],
    dtype: str = "bf16",
    extra: dict | None = None,
) -> dict:
    """Write `tensors` (official names) as a delta; returns its manifest (sha256, size, layers).

    `kda_layers` are 0-based here and stored 1-based. `dtype`: "bf16" or "int8" for the matrix
    weights; fp32 parameters the engine keeps in fp32 stay fp32.
    """
    from safetensors.torch import save_file

    if dtype not in ("bf16", "int8"):
        raise ValueError(f"delta dtype must be bf16 or int8, got {dtype!r}")
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if _keep_fp32(name, t):
            out[f"t::{name}"] = t.detach().float().contiguous()
        elif dtype == "bf16":
            out[f"t::{name}"] = t.detach().to(torch.bfloat16).contiguous()
        else:
            q, s = quantize_int8(t.detach())
            out[f"q::{name}"], out[f"s::{name}"] = q.contiguous(), s.contiguous()
    layers_1b = sorted(i + 1 for i in kda_layers)
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "dtype": dtype,
        "kda_layers": json.dumps(layers_1b),
        "replace_prefixes": json.dumps(sorted(replace_prefixes)),
        "extra": json.dumps(extra or {}),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(out, str(path), metadata=meta)
    return {
        "file": path.name,
        "sha256": sha256_file(path),
        "bytes": path.stat().st_size,
        "dtype": dtype,
        "kda_layers": layers_1b,
        **(extra or {}),
    }


def read_delta(
    path: str | Path, expected_sha256: str | None = None
) -> tuple[dict, dict[str, torch.Tensor]]:
    """(metadata, fp32 tensors by official name) of a delta, after checking its sha256."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"delta not found: {path}")
    if expected_sha256 is not None:
        got = sha256_file(path)
        if got != expected_sha256:
            raise CheckpointError(
                f"{path}: sha256 {got[:16]}… does not match the expected {expected_sha256[:16]}…",
                hint="the delta file is corrupt or not the one its manifest describes",
            )
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = dict(f.metadata() or {})
            raw = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # noqa: BLE001 - safetensors raises several types
        raise CheckpointError(f"{path}: cannot read delta ({e})") from e
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a k3chat delta (format {meta.get('format')!r})")
    tensors = {}
    for key, t in raw.items():
        kind, _, name = key.partition("::")
        if kind == "t":
            tensors[name] = t
        elif kind == "q":
            scale = raw[f"s::{name}"]
            tensors[name] = (t.float().reshape(t.shape[0], -1) * scale[:, None]).reshape(t.shape)
    meta["kda_layers"] = json.loads(meta["kda_layers"])
    meta["replace_prefixes"] = json.loads(meta["replace_prefixes"])
    meta["extra"] = json.loads(meta.get("extra", "{}"))
    return meta, tensors


def _write_atomic_json(path: Path, obj: dict) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def _set_layers(config: dict, kda_1b: list[int]) -> dict:
    text = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    n = text["num_hidden_layers"]
    lin = dict(text.get("linear_attn_config") or {})
    kda = sorted(set(lin.get("kda_layers") or []) | set(kda_1b))
    if any(not 1 <= x <= n for x in kda):
        raise CheckpointError(f"delta names KDA layers {kda} outside 1..{n}")
    lin["kda_layers"] = kda
    lin["full_attn_layers"] = [x for x in range(1, n + 1) if x not in kda]
    text["linear_attn_config"] = lin
    return config


def apply_delta(
    checkpoint_dir: str | Path, delta_path: str | Path, expected_sha256: str | None = None
) -> str:
    """Apply a delta to a teacher checkpoint directory in place; returns the delta's sha256.

    Raises:
        CheckpointError: hash mismatch, unreadable delta or checkpoint, a delta tensor that the
            checkpoint cannot hold, or a different delta already applied.
    """
    from safetensors import safe_open
    from safetensors.torch import save_file

    ckpt = Path(checkpoint_dir)
    digest = sha256_file(Path(delta_path))
    if expected_sha256 is not None and digest != expected_sha256:
        raise CheckpointError(
            f"{delta_path}: sha256 {digest[:16]}… does not match the expected "
            f"{expected_sha256[:16]}…",
            hint="the delta file is corrupt",
        )
    marker = ckpt / MARKER
    if marker.exists():
        done = json.loads(marker.read_text()).get("sha256")
        if done == digest:
            return digest
        raise CheckpointError(
            f"{ckpt}: another delta ({str(done)[:16]}…) is already applied",
            hint="rebuild the base checkpoint before applying a different delta",
        )
    meta, tensors = read_delta(delta_path, digest)
    prefixes = tuple(meta["replace_prefixes"])
    index_path = ckpt / INDEX
    try:
        index = json.loads(index_path.read_text())
        config = json.loads((ckpt / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{ckpt}: needs config.json and {INDEX} ({e})") from e
    weight_map: dict[str, str] = index["weight_map"]
    drop = {n for n in weight_map if n.startswith(prefixes) or n in tensors}
    for shard in sorted({weight_map[n] for n in drop}):
        with safe_open(str(ckpt / shard), framework="pt") as f:
            keep = {k: f.get_tensor(k) for k in f.keys() if k not in drop}
            smeta = f.metadata() or {"format": "pt"}
        fd, tmp = tempfile.mkstemp(prefix=f".{shard}.", dir=ckpt)
        os.close(fd)
        save_file(keep, tmp, metadata=smeta)
        os.replace(tmp, ckpt / shard)
    for n in drop:
        weight_map.pop(n)
    out = {n: t.contiguous() for n, t in tensors.items()}
    fd, tmp = tempfile.mkstemp(prefix=f".{DELTA_SHARD}.", dir=ckpt)
    os.close(fd)
    save_file(out, tmp, metadata={"format": "pt"})
    os.replace(tmp, ckpt / DELTA_SHARD)
    weight_map.update(dict.fromkeys(out, DELTA_SHARD))
    _write_atomic_json(index_path, index)
    _write_atomic_json(ckpt / "config.json", _set_layers(config, meta["kda_layers"]))
    _write_atomic_json(
        marker, {"sha256": digest, "kda_layers": meta["kda_layers"], "dtype": meta["dtype"]}
    )
    return digest
