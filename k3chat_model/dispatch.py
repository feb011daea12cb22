"""Place a checkpoint over GPU / CPU / disk with Accelerate.

Weights mapped to "disk" are never copied: the offload index points Accelerate at the original
safetensors shards, and its hooks load a module's weights just before that module runs. Each
routed expert is its own module (`no_split_module_classes`), and the MoE only calls the experts
its router picked, so an offloaded MoE layer reads just the selected experts per token; and
`prefetch.ExpertPrefetcher` asks the kernel to read ahead the next layer's recently used experts.
Small fp32 parameters (KDA gates, conv, norms, the router) always stay in RAM.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .errors import K3Error
from .loading import Progress, build_empty, fill_from_checkpoint, keep_high_precision

NO_SPLIT = [
    "Expert",
    "KimiDeltaAttention",
    "MLAttention",
    "GQAAttention",
    "GatedMLP",
    "AttnResSite",
    "Router",
]


def _device_for(name: str, device_map: dict[str, str | int | torch.device]) -> str:
    best, dev = -1, "cpu"
    for prefix, d in device_map.items():
        if prefix == "" or name == prefix or name.startswith(prefix + "."):
            if len(prefix) > best:
                best, dev = len(prefix), d
    dev = str(dev)
    return f"cuda:{dev}" if dev.isdigit() else dev


def plan_device_map(model, device_map, max_memory: dict | None, dtype: torch.dtype) -> dict:
    """Resolve "auto"/"cpu"/dict into a concrete {module prefix: device} map."""
    from accelerate import infer_auto_device_map

    if isinstance(device_map, dict):
        return device_map
    if device_map in (None, "cpu"):
        return (
            {"": "cpu"}
            if not max_memory
            else infer_auto_device_map(
                model, max_memory=max_memory, no_split_module_classes=NO_SPLIT, dtype=dtype
            )
        )
    if device_map in ("auto", "balanced", "sequential"):
        return infer_auto_device_map(
            model, max_memory=max_memory, no_split_module_classes=NO_SPLIT, dtype=dtype
        )
    if isinstance(device_map, str):
        try:
            torch.device(device_map)
        except RuntimeError:
            pass
        else:
            return {"": device_map}
    raise K3Error(
        f"unknown device_map {device_map!r}", hint='use "auto", "cpu" or a {module: device} dict'
    )


def load_dispatched(
    path: Path,
    *,
    dtype: torch.dtype,
    device_map=None,
    max_memory: dict | None = None,
    offload_folder: str | None = None,
    quantization: str | None = None,
    progress: Progress | None = None,
):
    """Load `path` placed per `device_map`/`max_memory`; disk-mapped weights stream from the shards."""
    from accelerate import dispatch_model

    model, shards = build_empty(Path(path))
    dmap = plan_device_map(model, device_map, max_memory, dtype)

    def place(name: str) -> str:
        dev = _device_for(name, dmap)
        if dev == "disk" and (keep_high_precision(name) or name.endswith(("A_log", "norm.weight"))):
            return "cpu"  # tiny, and the loader reshapes some of them (A_log)
        return dev

    index: dict[str, dict] = {}
    fill_from_checkpoint(
        model, Path(path), shards, dtype, place=place, offload_index=index, progress=progress
    )
    model.eval().requires_grad_(False)
    if quantization:
        if index:
            raise K3Error(
                "bitsandbytes quantization cannot be combined with disk offload",
                hint="4-bit weights do not stream through Accelerate hooks; give more max_memory or drop --quantize",
            )
        from .quantize import quantize_model

        quantize_model(model, quantization)
    if not index and all(str(d) == "cpu" for d in dmap.values()):
        return model
    main = next((str(d) for d in dmap.values() if str(d) not in ("cpu", "disk")), "cpu")
    main = f"cuda:{main}" if main.isdigit() else main
    if offload_folder is None and index:
        import tempfile

        offload_folder = tempfile.mkdtemp(prefix="k3chat-offload-")
    # tensors of disk-mapped modules that stayed in RAM: Accelerate's hooks serve them from here
    kept = {
        n: t
        for n, t in [*model.named_parameters(), *model.named_buffers()]
        if not t.is_meta and _device_for(n, dmap) == "disk"
    }
    model = dispatch_model(
        model,
        dmap,
        main_device=main,
        state_dict=kept,
        offload_dir=offload_folder,
        offload_index=index or None,
        offload_buffers=True,
        force_hooks=True,
    )
    model.offload_map = dmap
    model.offload_index = index
    if any(".experts." in n for n in index):
        from .prefetch import ExpertPrefetcher

        model.prefetcher = ExpertPrefetcher(index)
        model.prefetcher.attach(model)
    return model
