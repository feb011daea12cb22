"""`K3Config`: one validated dataclass read from HF `config.json` (spec §1).

Accepts the multimodal `kimi_k3` wrapper (`text_config` of type `kimi_linear`, top-level
`quantization_config`) or a plain `kimi_linear` config (Kimi Linear 48B-A3B). Layers are built
from `(config, layer_idx)` and read nothing else.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import ConfigError, UnsupportedArchitecture

log = logging.getLogger(__name__)

WRAPPER_TYPES = {"kimi_k3"}
TEXT_TYPES = {"kimi_linear"}


@dataclass
class K3Config:
    hidden_size: int
    num_hidden_layers: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    hidden_act: str = "situ"
    activation_situ_beta: float = 4.0
    activation_situ_linear_beta: float = 25.0
    max_position_embeddings: int = 1048576

    # FFN / MoE (spec §2.6)
    intermediate_size: int = 0
    first_k_dense_replace: int = 1
    moe_layer_freq: int = 1
    num_experts: int = 0
    num_experts_per_token: int = 0
    num_shared_experts: int = 0
    moe_intermediate_size: int = 0
    routed_expert_hidden_size: int | None = None
    """LatentMoE latent width; None = the plain Kimi Linear MoE."""
    latent_moe_use_norm: bool = True
    moe_router_activation_func: str = "sigmoid"
    moe_renormalize: bool = True
    routed_scaling_factor: float = 1.0
    num_expert_group: int = 1
    topk_group: int = 1

    # full attention: "mla" (K3, Kimi Linear) or "gqa" (converted models, RoPE)
    full_attn_type: str = "mla"
    num_attention_heads: int = 0
    num_key_value_heads: int = 0
    q_lora_rank: int | None = None
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    mla_use_output_gate: bool = False
    mla_lora_norm_eps: float = 1e-6
    head_dim: int | None = None
    """GQA head dim (defaults to hidden_size // num_attention_heads)."""
    rope_theta: float = 10000.0

    # KDA (spec §2.5)
    kda_num_heads: int = 0
    kda_head_dim: int = 128
    kda_conv_kernel: int = 4
    kda_full_rank_gate: bool = False
    kda_gate_lower_bound: float | None = None
    kda_layers: list[int] = field(default_factory=list)
    """0-based indices of the KDA layers."""

    # Block Attention Residuals (spec §2.2-2.3); None = plain residual stream
    attn_res_block_size: int | None = None

    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    model_type: str = "kimi_linear"
    quantization_config: dict | None = None

    # ---- derived ---------------------------------------------------------------------------
    @property
    def layer_kinds(self) -> list[str]:
        """Token mixer per layer: "kda" or the full-attention type ("mla" | "gqa")."""
        kda = set(self.kda_layers)
        return ["kda" if i in kda else self.full_attn_type for i in range(self.num_hidden_layers)]

    def is_moe_layer(self, i: int) -> bool:
        return (
            self.num_experts > 0
            and i >= self.first_k_dense_replace
            and (i - self.first_k_dense_replace) % max(self.moe_layer_freq, 1) == 0
        )

    @property
    def gqa_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def uses_attn_res(self) -> bool:
        return bool(self.attn_res_block_size)

    def config_hash(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    # ---- parsing ---------------------------------------------------------------------------
    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> K3Config:
        """Build from a parsed config.json (wrapper or plain text config)."""
        if not isinstance(raw, dict):
            raise ConfigError("config.json must hold a JSON object")
        model_type = raw.get("model_type")
        quant = raw.get("quantization_config")
        top = raw
        if model_type in WRAPPER_TYPES:
            text = raw.get("text_config")
            if not isinstance(text, dict):
                raise ConfigError(f"model_type {model_type!r} needs a `text_config` object")
            quant = quant or text.get("quantization_config")
            raw = text
            model_type = raw.get("model_type", "kimi_linear")
        if model_type not in TEXT_TYPES:
            raise UnsupportedArchitecture(
                f"unknown model_type {model_type!r}",
                hint="k3chat runs kimi_k3 and kimi_linear checkpoints",
            )
        kw: dict[str, Any] = {}
        known = {f.name for f in fields(cls)}
        for key, value in raw.items():
            if key in known:
                kw[key] = value
        for key in ("bos_token_id", "eos_token_id"):
            if key not in kw and key in top:
                kw[key] = top[key]
        if "num_experts_per_tok" in raw and "num_experts_per_token" not in raw:
            kw["num_experts_per_token"] = raw["num_experts_per_tok"]
        if raw.get("mla_use_output_gate") is not None:
            kw["mla_use_output_gate"] = bool(raw["mla_use_output_gate"])
        if raw.get("mla_use_nope") is False:
            raise UnsupportedArchitecture(
                "MLA with rotary embeddings (mla_use_nope=false) is not supported"
            )
        lin = raw.get("linear_attn_config") or {}
        n = raw.get("num_hidden_layers")
        if not isinstance(n, int) or n <= 0:
            raise ConfigError("num_hidden_layers must be a positive integer")
        kda_1b = list(lin.get("kda_layers") or [])
        full_1b = list(lin.get("full_attn_layers") or [])
        if not kda_1b and not full_1b:
            full_1b = list(range(1, n + 1))
        for name, lst in (("kda_layers", kda_1b), ("full_attn_layers", full_1b)):
            bad = [x for x in lst if not isinstance(x, int) or not 1 <= x <= n]
            if bad:
                raise ConfigError(
                    f"linear_attn_config.{name} has out-of-range entries {bad[:5]} (layers are 1..{n})"
                )
        overlap = sorted(set(kda_1b) & set(full_1b))
        if overlap:
            raise ConfigError(f"layers {overlap[:5]} are listed as both KDA and full attention")
        missing = sorted(set(range(1, n + 1)) - set(kda_1b) - set(full_1b))
        if missing:
            raise ConfigError(
                f"layers {missing[:5]} are in neither kda_layers nor full_attn_layers"
            )
        kw["kda_layers"] = sorted(x - 1 for x in kda_1b)
        kw["kda_num_heads"] = lin.get("num_heads", raw.get("num_attention_heads", 0))
        kw["kda_head_dim"] = lin.get("head_dim", 128)
        kw["kda_conv_kernel"] = lin.get("short_conv_kernel_size", 4)
        kw["kda_full_rank_gate"] = bool(lin.get("use_full_rank_gate", False))
        kw["kda_gate_lower_bound"] = lin.get("gate_lower_bound")
        kw["model_type"] = model_type
        kw["quantization_config"] = quant
        ignored = sorted(
            set(raw) - known - {"linear_attn_config", "num_experts_per_tok", "mla_use_nope"}
        )
        if ignored:
            log.debug("config.json keys not used by the engine: %s", ", ".join(ignored))
        try:
            cfg = cls(**kw)
        except TypeError as e:
            raise ConfigError(f"config.json is missing a required field: {e}") from e
        cfg.validate()
        return cfg

    @classmethod
    def from_file(cls, path: str | Path) -> K3Config:
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError as e:
            raise ConfigError(f"{path}: file not found") from e
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: not valid JSON ({e})") from e
        try:
            return cls.from_hf(raw)
        except ConfigError as e:
            raise type(e)(f"{path}: {e.msg}", e.hint) from e

    def validate(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ConfigError(msg)

        need(
            self.hidden_size > 0 and self.vocab_size > 0,
            "hidden_size and vocab_size must be positive",
        )
        need(
            self.hidden_act in ("situ", "silu"),
            f"hidden_act {self.hidden_act!r} is not one of situ, silu",
        )
        need(
            self.full_attn_type in ("mla", "gqa"),
            f"full_attn_type {self.full_attn_type!r} is not mla or gqa",
        )
        kinds = self.layer_kinds
        if "kda" in kinds:
            need(self.kda_num_heads > 0, "linear_attn_config.num_heads must be positive")
            need(self.kda_conv_kernel >= 1, "short_conv_kernel_size must be >= 1")
        if "mla" in kinds:
            need(self.num_attention_heads > 0, "num_attention_heads must be positive")
        if "gqa" in kinds:
            h, kv = self.num_attention_heads, self.num_key_value_heads or self.num_attention_heads
            need(h > 0, "num_attention_heads must be positive")
            need(
                h % kv == 0,
                f"num_attention_heads={h} must be divisible by num_key_value_heads={kv}",
            )
            need(
                self.head_dim is not None or self.hidden_size % h == 0,
                f"hidden_size={self.hidden_size} must be divisible by num_attention_heads={h}",
            )
            need(self.gqa_head_dim % 2 == 0, "GQA head_dim must be even for RoPE")
        if self.num_experts:
            need(
                0 < self.num_experts_per_token <= self.num_experts,
                f"num_experts_per_token={self.num_experts_per_token} must be in 1..num_experts={self.num_experts}",
            )
            need(self.moe_intermediate_size > 0, "moe_intermediate_size must be positive")
            need(
                self.moe_router_activation_func in ("sigmoid", "softmax"),
                f"moe_router_activation_func {self.moe_router_activation_func!r} is not sigmoid or softmax",
            )
        if any(not self.is_moe_layer(i) for i in range(self.num_hidden_layers)):
            need(
                self.intermediate_size > 0,
                "intermediate_size must be positive for dense MLP layers",
            )
        if self.attn_res_block_size is not None:
            need(self.attn_res_block_size > 0, "attn_res_block_size must be positive")

    @property
    def eos_token_ids(self) -> list[int]:
        e = self.eos_token_id
        if e is None:
            return []
        return list(e) if isinstance(e, list) else [e]
