"""`Engine`: model + tokenizer + chat format + one conversation's cache, with streaming generation.

Across turns the whole conversation is re-rendered and only tokens the cache does not cover are
prefilled. Attention caches can be trimmed to a common prefix; KDA state cannot, so the engine
keeps a copy of it at the last prompt boundary and rewinds there when the next prompt diverges
after it (e.g. the re-rendered assistant reply tokenises differently from what was sampled).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from .cache import Cache, KDAState
from .config import K3Config
from .errors import ModelNotFound, StateMismatch
from .events import (
    EngineEvent,
    Message,
    PrefillProgress,
    SamplingParams,
    Stats,
    ToolCallParsed,
)
from .generation import sample_next

PREFILL_CHUNK = 512
SMALL_MODEL_BYTES = 2 << 30
"""Below this, a decode step is a chain of tiny GEMVs: one thread beats two (OpenMP sync
costs more than it saves, and collapses when another process holds a core; docs/benchmarks.md)."""
STATE_FILE = "cache.safetensors"
STATE_VERSION = "1"

Progress = Callable[[str, int, int], None]


def resolve_model_dir(model: str | Path, progress: Progress | None = None) -> Path:
    """A checkpoint directory for a model name or path ("k3-smol" is built on first use)."""
    if str(model) in ("k3-smol", "default"):
        from .default_model import ensure_default_model

        return ensure_default_model(progress)
    path = Path(model).expanduser()
    if path.is_dir() and (path / "config.json").exists():
        return path
    if path.is_dir():
        raise ModelNotFound(
            f"{path}: no config.json in this directory",
            hint="point --model at a checkpoint directory",
        )
    raise ModelNotFound(
        f"unknown model {str(model)!r}",
        hint="use 'k3-smol' (the built-in default) or a path to a checkpoint directory",
    )


def weights_fingerprint(path: Path) -> str:
    """Identifies config + weights without reading the weights: config, index and shard sizes."""
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors.index.json", "weights_id"):
        f = path / name
        if f.exists():
            h.update(name.encode() + f.read_bytes())
    for f in sorted(path.glob("*.safetensors")):
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()[:16]


class Engine:
    def __init__(
        self,
        model,
        tokenizer,
        chat_format,
        *,
        model_dir: Path,
        model_id: str,
        quantization: str | None = None,
        default_sampling: SamplingParams | None = None,
    ) -> None:
        self.model = model
        self.config: K3Config = model.config
        self.tokenizer = tokenizer
        self.chat_format = chat_format
        self.model_dir = model_dir
        self.model_id = model_id
        self.quantization = quantization
        self.config_hash = weights_fingerprint(model_dir)
        self.context_length = self.config.max_position_embeddings
        self.default_sampling = default_sampling or SamplingParams()
        self.supports_tools = bool(getattr(chat_format, "supports_tools", False))
        self.native_tools = bool(getattr(chat_format, "native_tools", False))
        self.supports_thinking = bool(getattr(chat_format, "supports_thinking", False))
        weights = sum(t.numel() * t.element_size() for t in model.parameters())
        env = os.environ.get("K3CHAT_DECODE_THREADS")
        self.decode_threads = (
            int(env) if env else (1 if weights < SMALL_MODEL_BYTES else torch.get_num_threads())
        )
        self.kv_ram_budget: int | None = None
        self.offload_dir: str | None = None
        self._lock = threading.Lock()
        self.reset()

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        model: str | Path = "k3-smol",
        *,
        dtype: str | torch.dtype = "auto",
        device_map: str | dict | None = None,
        max_memory: dict | None = None,
        offload_folder: str | None = None,
        quantization: str | None = None,
        kv_ram_budget: int | None = None,
        progress: Progress | None = None,
    ) -> Engine:
        from .chat_format import load_chat_format
        from .loading import DTYPES, load_model
        from .tokenizer import load_tokenizer

        path = resolve_model_dir(model, progress)
        if isinstance(dtype, str):
            dtype = torch.bfloat16 if dtype == "auto" else DTYPES[dtype]
        if device_map is not None or max_memory is not None or offload_folder is not None:
            from .dispatch import load_dispatched

            net = load_dispatched(
                path,
                dtype=dtype,
                device_map=device_map,
                max_memory=max_memory,
                offload_folder=offload_folder,
                quantization=quantization,
                progress=progress,
            )
        else:
            net = load_model(path, dtype=dtype, progress=progress)
            if quantization:
                from .quantize import quantize_model

                quantize_model(net, quantization)
        tok = load_tokenizer(path)
        raw_config = json.loads((path / "config.json").read_text())
        fmt = load_chat_format(path, tok, raw_config)
        model_id = "k3-smol" if str(model) in ("k3-smol", "default") else path.name
        engine = cls(
            net,
            tok,
            fmt,
            model_dir=path,
            model_id=model_id,
            quantization=quantization,
            default_sampling=_generation_defaults(path),
        )
        engine.kv_ram_budget = kv_ram_budget
        engine.offload_dir = offload_folder
        engine.reset()
        return engine

    # ---- cache bookkeeping -----------------------------------------------------------------
    def reset(self) -> None:
        """Forget the conversation: an empty cache."""
        self.cache = self._new_cache()
        self._ids: list[int] = []
        self._boundary: tuple[int, list[KDAState | None]] | None = None

    def _new_cache(self) -> Cache:
        return self.model.make_cache(
            ram_budget_bytes=getattr(self, "kv_ram_budget", None),
            offload_dir=getattr(self, "offload_dir", None),
        )

    @property
    def cached_tokens(self) -> int:
        return len(self._ids)

    def _rewind_for(self, ids: list[int]) -> int:
        """Make the cache cover a prefix of `ids` (leaving ≥ 1 token to prefill); return its length."""
        common = 0
        for a, b in zip(self._ids, ids):
            if a != b:
                break
            common += 1
        common = min(common, len(ids) - 1)
        if common == len(self._ids):
            return common
        if self.cache.trimmable:
            self.cache.trim(common)
        elif self._boundary is not None and self._boundary[0] <= common:
            n, kda = self._boundary
            self.cache.restore(n, kda)
            common = n
        else:
            self.cache = self._new_cache()
            common = 0
        self._ids = self._ids[:common]
        return common

    # ---- token counting --------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))

    def render(
        self, messages: list[Message], tools: list[dict] | None = None, thinking: bool = False
    ) -> list[int]:
        return self.chat_format.encode(
            messages, tools=tools, thinking=thinking, add_generation_prompt=True
        )

    def count_message_tokens(
        self, messages: list[Message], tools: list[dict] | None = None, thinking: bool = False
    ) -> int:
        return len(self.render(messages, tools, thinking))

    # ---- generation ------------------------------------------------------------------------
    @torch.inference_mode()
    def _forward(self, ids: list[int]) -> torch.Tensor:
        x = torch.tensor([ids], dtype=torch.long, device=self._device())
        return self.model(x, self.cache, num_logits=1).logits[0, -1]

    def _device(self) -> torch.device:
        return self.model.model.embed_tokens.weight.device

    def _prefill_steps(self, ids: list[int], cancel: threading.Event | None):
        """Yield (done, total, logits) after each chunk of the tokens the cache does not cover."""
        todo = ids[self._rewind_for(ids) :]
        done = 0
        for i in range(0, len(todo), PREFILL_CHUNK):
            if cancel is not None and cancel.is_set():
                return
            chunk = todo[i : i + PREFILL_CHUNK]
            logits = self._forward(chunk)
            self._ids.extend(chunk)
            done += len(chunk)
            yield done, len(todo), logits

    def prefill(
        self,
        ids: list[int],
        *,
        cancel: threading.Event | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> tuple[torch.Tensor | None, int]:
        """Make the cache cover `ids`. Returns (last-token logits, or None if cancelled; tokens computed)."""
        logits, done, total = None, 0, 0
        for done, total, logits in self._prefill_steps(ids, cancel):
            if on_progress:
                on_progress(done, total)
        return (logits if done == total else None), done

    def generate(
        self,
        messages: list[Message],
        *,
        tools: list[dict] | None = None,
        sampling: SamplingParams | None = None,
        thinking: bool = False,
        cancel: threading.Event | None = None,
        on_prefill_progress: Callable[[int, int], None] | None = None,
    ) -> Iterator[EngineEvent]:
        """Stream events for the assistant's reply to `messages`; `Stats` is always the last event."""
        with self._lock:
            yield from self._generate(
                messages,
                tools,
                sampling or self.default_sampling,
                thinking,
                cancel,
                on_prefill_progress,
            )

    def _generate(self, messages, tools, sp: SamplingParams, thinking, cancel, on_prefill_progress):
        ids = self.render(messages, tools if self.supports_tools else None, thinking)
        t0 = time.perf_counter()
        logits, prefilled, total = None, 0, 0
        for prefilled, total, logits in self._prefill_steps(ids, cancel):
            if on_prefill_progress:
                on_prefill_progress(prefilled, total)
            yield PrefillProgress(prefilled, total)
        if prefilled != total or logits is None:
            logits = None
        t1 = time.perf_counter()
        if logits is None:
            yield self._stats(ids, prefilled, 0, t1 - t0, 0.0, "cancelled")
            return
        if any(isinstance(la, KDAState) for la in self.cache.layers):
            self._boundary = (self.cached_tokens, self.cache.recurrent_copy())
        parser = self.chat_format.new_parser(thinking=thinking)
        threads = torch.get_num_threads()
        torch.set_num_threads(min(self.decode_threads, threads))
        try:
            produced, finish, saw_tool = yield from self._decode(logits, ids, sp, parser, cancel)
        finally:
            torch.set_num_threads(threads)
        if finish == "stop" and saw_tool:
            finish = "tool_calls"
        yield self._stats(ids, prefilled, produced, t1 - t0, time.perf_counter() - t1, finish)

    def _decode(self, logits, ids, sp: SamplingParams, parser, cancel):
        """Sample until a stop token, the token limit or cancel; yields parsed events."""
        stops = set(self.chat_format.stop_token_ids()) | set(sp.stop_token_ids)
        gen = torch.Generator().manual_seed(sp.seed) if sp.seed is not None else None
        recent = list(ids[-sp.repetition_window :]) if sp.repetition_window else []
        produced, finish, saw_tool = 0, "length", False
        limit = max(0, min(sp.max_tokens, self.context_length - len(ids)))
        for _ in range(limit):
            if cancel is not None and cancel.is_set():
                finish = "cancelled"
                break
            window = recent[-sp.repetition_window :] if sp.repetition_window else []
            tok = sample_next(
                logits, sp, torch.tensor(window, dtype=torch.long, device=logits.device), gen
            )
            produced += 1
            if tok in stops:
                finish = "stop"
                break
            for ev in parser.feed(tok):
                saw_tool |= isinstance(ev, ToolCallParsed)
                yield ev
            recent.append(tok)
            if produced >= limit:
                break
            logits = self._forward([tok])
            self._ids.append(tok)
        for ev in parser.finish():
            saw_tool |= isinstance(ev, ToolCallParsed)
            yield ev
        return produced, finish, saw_tool

    def _stats(self, ids, prefilled, produced, prefill_s, decode_s, finish) -> Stats:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return Stats(
            prompt_tokens=len(ids),
            prefilled_tokens=prefilled,
            completion_tokens=produced,
            prefill_s=prefill_s,
            decode_s=decode_s,
            finish_reason=finish,
            context_tokens=self.cached_tokens,
            peak_bytes=peak,
        )

    # ---- snapshots -------------------------------------------------------------------------
    def save_state(self, directory: str | Path) -> None:
        """Write the cache, the token ids it covers and the model fingerprint (atomically)."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".state-", dir=directory.parent))
        try:
            meta = {
                "format": STATE_VERSION,
                "config_hash": self.config_hash,
                "model_id": self.model_id,
                "token_ids": json.dumps(self._ids),
                "seen": str(self.cache.seen),
            }
            tensors = self.cache.state_dict()
            if self._boundary is not None:
                n, kda = self._boundary
                meta["boundary"] = str(n)
                for i, st in enumerate(kda):
                    if st is not None:
                        tensors.update(
                            {
                                f"boundary.{i}.{k}": v.cpu().contiguous()
                                for k, v in st.state().items()
                            }
                        )
            save_file(tensors, str(tmp / STATE_FILE), metadata=meta)
            os.chmod(tmp / STATE_FILE, 0o600)
            if directory.exists():
                shutil.rmtree(directory)
            os.replace(tmp, directory)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def load_state(self, directory: str | Path) -> bool:
        """Restore a snapshot; False (engine unchanged) if there is none or it is unreadable.

        Raises:
            StateMismatch: the snapshot was made with another model or config.
        """
        from safetensors import safe_open

        file = Path(directory) / STATE_FILE
        if not file.exists():
            return False
        try:
            with safe_open(str(file), framework="pt") as f:
                meta = f.metadata() or {}
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except Exception:  # noqa: BLE001 - a damaged snapshot is only a cache miss
            return False
        if meta.get("config_hash") != self.config_hash:
            raise StateMismatch(
                f"{file}: snapshot was made by another model ({meta.get('model_id', '?')}, "
                f"hash {meta.get('config_hash', '?')}), this is {self.model_id} ({self.config_hash})",
                hint="the session will be re-prefilled from its events instead",
            )
        cache = self._new_cache()
        dev = self._device()
        cache.load_state_dict(
            {k: v for k, v in tensors.items() if k.startswith("layers.")},
            int(meta.get("seen", 0)),
            dev,
        )
        self.cache = cache
        self._ids = json.loads(meta.get("token_ids", "[]"))
        self._boundary = None
        if "boundary" in meta:
            kda: list[KDAState | None] = []
            for i, kind in enumerate(self.config.layer_kinds):
                if kind != "kda":
                    kda.append(None)
                    continue
                st = KDAState()
                pre = f"boundary.{i}."
                st.load({k[len(pre) :]: v.to(dev) for k, v in tensors.items() if k.startswith(pre)})
                kda.append(st)
            self._boundary = (int(meta["boundary"]), kda)
        return True

    def memory_report(self) -> dict[str, int]:
        weights = sum(t.numel() * t.element_size() for t in self.model.parameters())
        weights += sum(t.numel() * t.element_size() for t in self.model.buffers())
        return {"weights": weights, **self.cache.memory_report()}


def _generation_defaults(path: Path) -> SamplingParams:
    """Sampling defaults: generation_config.json where present, else ours (with a repetition penalty)."""
    sp = SamplingParams()
    f = path / "generation_config.json"
    if f.exists():
        try:
            cfg = json.loads(f.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return sp
        for key in ("temperature", "top_p", "top_k", "repetition_penalty"):
            if isinstance(cfg.get(key), (int, float)):
                setattr(sp, key, cfg[key])
    return sp
