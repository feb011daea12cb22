"""Load official-layout checkpoints: sharded safetensors + index, official names, MXFP4 experts.

The model is built on the meta device and filled shard by shard, one tensor at a time, so the
state dict is never held twice. Official names are translated in one place
(`remap_official_name`); layer code never sees them. Precision rules live in
`keep_high_precision`, which quantization and dispatch also read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from .config import K3Config
from .errors import CheckpointError
from .layers.linear import Linear
from .layers.mxfp4 import MXFP4Linear
from .model import K3ForCausalLM

SKIP_PREFIXES = ("vision_tower.", "mm_projector.", "language_model.vision_tower.")
IGNORED_SUFFIXES = (".weight_shape", "rotary_emb.inv_freq")
# the dtype names `load_model` and `Engine.load` accept
DTYPES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
}
HIGH_PRECISION = re.compile(
    r"(A_log|dt_bias|conv1d\.weight|o_norm\.weight|e_score_correction_bias|block_sparse_moe\.gate\.weight)$"
)
_ATTN_RES = re.compile(r"(self_attention|mlp|output_attn)_res_(norm|proj)\.weight$")

Progress = Callable[[str, int, int], None]


def keep_high_precision(name: str) -> bool:
    """Tensors the reference keeps in fp32 (KDA gate/conv/norm params, the router)."""
    return bool(HIGH_PRECISION.search(name))


def remap_official_name(name: str) -> str | None:
    """Official (HF/vLLM) tensor name -> this engine's parameter name; None = not for the text model."""
    if name.startswith(SKIP_PREFIXES) or name.endswith(IGNORED_SUFFIXES):
        return None
    if name.startswith("language_model."):
        name = name[len("language_model.") :]
    if name.startswith("layers."):
        name = "model." + name
    return _ATTN_RES.sub(lambda m: f"{m.group(1)}_res.{m.group(2)}_weight", name)


def checkpoint_files(path: Path) -> dict[str, list[str]]:
    """Shard file -> tensor names, from the index if present, else every *.safetensors file."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{index}: not a valid safetensors index ({e})") from e
        shards: dict[str, list[str]] = {}
        for tensor, shard in weight_map.items():
            shards.setdefault(shard, []).append(tensor)
        for shard in shards:
            if not (path / shard).exists():
                raise CheckpointError(f"{path / shard}: shard listed in the index is missing")
        return shards
    files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no *.safetensors files and no model.safetensors.index.json")
    return {f: [] for f in files}


def _set_tensor(model: nn.Module, name: str, value: torch.Tensor) -> None:
    mod_name, _, attr = name.rpartition(".")
    mod = model.get_submodule(mod_name)
    if attr in mod._parameters:
        mod._parameters[attr] = nn.Parameter(value, requires_grad=False)
    else:
        mod._buffers[attr] = value


def _expected(model: nn.Module, name: str) -> torch.Tensor | None:
    mod_name, _, attr = name.rpartition(".")
    try:
        mod = model.get_submodule(mod_name)
    except AttributeError:
        return None
    t = mod._parameters.get(attr)
    return t if t is not None else mod._buffers.get(attr)


def _fit_a_log(value: torch.Tensor, want: torch.Size, shard: str, name: str) -> torch.Tensor:
    """A_log comes as [H], [1,1,H,1] (Kimi Linear) or zero-padded [128] (K3): return [H]."""
    flat = value.reshape(-1)
    H = want[0]
    if flat.numel() == H:
        return flat
    if flat.numel() > H and torch.all(flat[H:] == 0):
        return flat[:H]
    raise CheckpointError(
        f"{shard}: {name} has {flat.numel()} values, expected {H} heads (or a zero-padded longer vector)"
    )


def load_model(
    path: str | Path,
    *,
    dtype: torch.dtype | str = torch.bfloat16,
    device: str | torch.device = "cpu",
    progress: Progress | None = None,
) -> K3ForCausalLM:
    """Load a checkpoint directory into a `K3ForCausalLM` (eval mode, no grad).

    Raises:
        ConfigError / UnsupportedArchitecture: config.json problems.
        CheckpointError: a shard is missing or unreadable, or a tensor is missing, unexpected,
            or of the wrong shape — the message names the file and the tensor.
    """
    path = Path(path)
    if isinstance(dtype, str):
        dtype = DTYPES[dtype]
    model, shards = build_empty(path)
    fill_from_checkpoint(model, path, shards, dtype, progress=progress)
    model.eval().requires_grad_(False)
    return model.to(device)


def build_empty(path: Path) -> tuple[K3ForCausalLM, dict[str, list[str]]]:
    """The model for `path` with every tensor on the meta device, and its shard map."""
    config = K3Config.from_file(path)
    shards = checkpoint_files(path)
    packed = any(n.endswith("weight_packed") for names in shards.values() for n in names)
    if not packed and all(not names for names in shards.values()):
        packed = _any_packed(path, shards)
    with torch.device("meta"):
        model = K3ForCausalLM(config, MXFP4Linear if packed else Linear)
    return model, shards


def fill_from_checkpoint(
    model: K3ForCausalLM,
    path: Path,
    shards: dict[str, list[str]],
    dtype: torch.dtype,
    *,
    place: Callable[[str], str] | None = None,
    offload_index: dict | None = None,
    progress: Progress | None = None,
) -> None:
    """Load every shard into `model`; raise CheckpointError naming what is still missing."""
    loaded: set[str] = set()
    total = len(shards)
    for i, shard in enumerate(sorted(shards)):
        _load_shard(model, path / shard, dtype, loaded, place, offload_index)
        if progress:
            progress("loading weights", i + 1, total)
    if model.config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    skip = set(offload_index or {})
    missing = [
        n
        for n, t in [*model.named_parameters(), *model.named_buffers()]
        if t.is_meta and n not in skip
    ]
    if missing:
        listed = {
            remap_official_name(k): (k, shard) for shard, keys in shards.items() for k in keys
        }
        where = [
            f"{listed[n][0]} (indexed in {listed[n][1]}, absent from the file)"
            if n in listed
            else n
            for n in missing[:5]
        ]
        raise CheckpointError(
            f"{path}: checkpoint is missing {len(missing)} tensor(s): {', '.join(where)}",
            hint="the checkpoint is incomplete or was written for another config",
        )


def _any_packed(path: Path, shards: dict[str, list[str]]) -> bool:
    from safetensors import safe_open

    for shard in shards:
        try:
            with safe_open(path / shard, framework="pt") as f:
                if any(k.endswith("weight_packed") for k in f.keys()):
                    return True
        except Exception as e:  # noqa: BLE001 - reported as a checkpoint error below
            raise CheckpointError(f"{path / shard}: cannot read safetensors file ({e})") from e
    return False


def _load_shard(
    model: nn.Module,
    file: Path,
    dtype: torch.dtype,
    loaded: set[str],
    place: Callable[[str], str] | None = None,
    offload_index: dict | None = None,
) -> None:
    """Fill the model's tensors from one shard.

    `place(name)` gives each tensor's device; "disk" tensors stay on meta and are recorded in
    `offload_index` as pointers into the original shard (Accelerate streams them from there).
    """
    from safetensors import safe_open

    try:
        f = safe_open(file, framework="pt")
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for damaged headers
        raise CheckpointError(
            f"{file}: cannot read safetensors file ({e})",
            hint="the file may be truncated or corrupt",
        ) from e
    with f:
        for key in f.keys():
            name = remap_official_name(key)
            if name is None:
                continue
            want = _expected(model, name)
            if want is None:
                raise CheckpointError(
                    f"{file}: unexpected tensor {key!r}",
                    hint="the checkpoint does not match config.json",
                )
            device = place(name) if place else "cpu"
            if device == "disk" and offload_index is not None:
                entry = {"safetensors_file": str(file), "weight_name": key}
                if want.is_floating_point():
                    entry["dtype"] = str(dtype).removeprefix("torch.")
                    # Accelerate casts streamed weights to the placeholder's dtype
                    _set_tensor(model, name, torch.empty(want.shape, dtype=dtype, device="meta"))
                offload_index[name] = entry
                loaded.add(name)
                continue
            try:
                value = f.get_tensor(key)
            except Exception as e:  # noqa: BLE001
                raise CheckpointError(
                    f"{file}: cannot read tensor {key!r} ({e})", hint="the file may be truncated"
                ) from e
            if name.endswith("A_log"):
                value = _fit_a_log(value, want.shape, file.name, key)
            if tuple(value.shape) != tuple(want.shape):
                raise CheckpointError(
                    f"{file}: tensor {key!r} has shape {list(value.shape)}, expected {list(want.shape)}"
                )
            if value.is_floating_point():
                keep = keep_high_precision(name) and value.dtype == torch.float32
                value = value.to(torch.float32 if keep else dtype)
            _set_tensor(model, name, value if device in ("cpu", "disk") else value.to(device))
            loaded.add(name)
