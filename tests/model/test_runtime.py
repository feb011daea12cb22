import bitsandbytes as bnb
import pytest
import torch

from k3chat_model.dispatch import load_dispatched
from k3chat_model.engine import Engine
from k3chat_model.errors import K3Error
from k3chat_model.events import Message, SamplingParams, TextDelta
from k3chat_model.layers.linear import Linear
from k3chat_model.layers.mxfp4 import MXFP4Linear
from k3chat_model.loading import load_model
from k3chat_model.quantize import quantize_model


@pytest.mark.parametrize("method", ["nf4", "int8"])
def test_quantized_model_keeps_router_fp16_and_projections_in_bnb_layers(tiny_checkpoints, method):
    model = load_model(tiny_checkpoints["kimi-linear-tiny"], dtype=torch.bfloat16)
    report = quantize_model(model, method)
    want = bnb.nn.Linear4bit if method == "nf4" else bnb.nn.Linear8bitLt
    layer1 = model.model.layers[1]
    moe = layer1.block_sparse_moe
    assert moe.gate.weight.dtype == torch.float16
    assert moe.gate.e_score_correction_bias.dtype == torch.float32
    assert isinstance(moe.experts[0].w1, want) and isinstance(moe.shared_experts.gate_proj, want)
    assert isinstance(layer1.self_attn.q_proj, want) and isinstance(layer1.self_attn.o_proj, want)
    assert type(model.lm_head) is Linear and type(model.model.embed_tokens) is torch.nn.Embedding
    assert type(layer1.self_attn.f_a_proj) is Linear and type(layer1.self_attn.b_proj) is Linear
    assert layer1.self_attn.A_log.dtype == torch.float32
    assert "model.layers.1.self_attn.b_proj" in report.skipped
    logits = model(torch.arange(30)[None]).logits
    assert torch.isfinite(logits).all()


def test_4bit_layers_compute_in_fp32_where_cpu_bf16_is_slow(tiny_checkpoints, bf16_mode):
    """bitsandbytes' CPU 4-bit path multiplies in the compute dtype: fp32 where bf16 is slow.
    Same quantized weights, so the logits are no further from a float64 model's."""
    ids = torch.arange(30)[None]
    out = {}
    for mode, want in (("fp32", torch.float32), ("native", torch.bfloat16)):
        bf16_mode(mode)
        model = load_model(tiny_checkpoints["kimi-linear-tiny"], dtype=torch.bfloat16)
        quantize_model(model, "nf4")
        with torch.no_grad():
            out[mode] = model(ids).logits
        q = model.model.layers[1].self_attn.q_proj
        assert isinstance(q, bnb.nn.Linear4bit) and q.compute_dtype == want
        assert out[mode].dtype == torch.bfloat16  # activations keep the model's dtype
    ref = load_model(tiny_checkpoints["kimi-linear-tiny"], dtype=torch.float64)
    with torch.no_grad():
        ref_logits = ref(ids).logits

    def rel(x: torch.Tensor) -> float:
        return float((x.double() - ref_logits).norm() / ref_logits.norm())

    assert rel(out["fp32"]) <= rel(out["native"]) * 1.05  # nf4's own error dominates both


def test_mxfp4_experts_are_never_silently_widened_by_quantization(tiny_checkpoints):
    model = load_model(tiny_checkpoints["k3-tiny"], dtype=torch.bfloat16)
    quantize_model(model, "nf4")
    w1 = model.model.layers[1].block_sparse_moe.experts[0].w1
    assert isinstance(w1, MXFP4Linear) and w1.weight_packed.dtype == torch.uint8


@pytest.mark.parametrize(
    ("preset", "dtype"),
    [("kimi-linear-tiny", torch.float32), ("k3-tiny", torch.float32), ("k3-tiny", torch.bfloat16)],
)
def test_disk_offload_gives_same_greedy_tokens_as_in_ram(tiny_checkpoints, tmp_path, preset, dtype):
    path = tiny_checkpoints[preset]
    ref = load_model(path, dtype=dtype)
    ids = torch.arange(3, 33)[None]
    expected = ref.generate_naive(ids, 5)
    model = load_dispatched(
        path,
        dtype=dtype,
        device_map="auto",
        max_memory={"cpu": 400_000},
        offload_folder=str(tmp_path / "off"),
    )
    assert "disk" in {str(d) for d in model.offload_map.values()}
    assert model.offload_index  # weights read from the original shards, not copied
    assert all(e["safetensors_file"].startswith(str(path)) for e in model.offload_index.values())
    assert torch.equal(model.generate_naive(ids, 5), expected)


def test_quantization_with_disk_offload_is_refused_clearly(tiny_checkpoints):
    with pytest.raises(K3Error, match="disk offload"):
        load_dispatched(
            tiny_checkpoints["kimi-linear-tiny"],
            dtype=torch.bfloat16,
            device_map="auto",
            max_memory={"cpu": 400_000},
            quantization="nf4",
        )


def test_kv_cache_spills_to_disk_beyond_budget_without_changing_results(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["k3-tiny"]
    sp = SamplingParams(temperature=0, repetition_penalty=1.0, max_tokens=10)
    msgs = [Message("user", "A long enough prompt to fill the attention cache " * 8)]
    plain = Engine.load(path, dtype="float32")
    spill = Engine.load(
        path, dtype="float32", kv_ram_budget=1024, offload_folder=str(tmp_path / "kv")
    )
    a = "".join(e.text for e in plain.generate(msgs, sampling=sp) if isinstance(e, TextDelta))
    b = "".join(e.text for e in spill.generate(msgs, sampling=sp) if isinstance(e, TextDelta))
    assert a == b
    report = spill.memory_report()
    assert report["cache_disk"] > 0 and plain.memory_report()["cache_disk"] == 0
    assert report["kda_state"] > 0 and report["weights"] > 0


def test_offloaded_experts_of_the_next_layer_are_read_ahead(tiny_checkpoints):
    from safetensors import safe_open

    path = tiny_checkpoints["kimi-linear-tiny"]
    model = load_dispatched(
        path, dtype=torch.float32, device_map="auto", max_memory={"cpu": 400_000}
    )
    pf = model.prefetcher
    ids = torch.arange(3, 20)[None]
    cache = model.make_cache()
    model(ids, cache)
    assert pf.issued == []  # nothing known before the first token
    used = list(pf.last_used[2])  # what layer 2 picked for the prompt
    model(ids[:, -1:], cache)
    assert used and pf.issued
    # the hinted byte ranges are exactly the bytes of layer 2's recently used experts
    want = {
        f"model.layers.2.block_sparse_moe.experts.{e}.{w}.weight"
        for e in used
        for w in ("w1", "w2", "w3")
    }
    hinted = {(f, o, n) for f, o, n in pf.issued}
    for name in want:
        entry = model.offload_index[name]
        with (
            open(entry["safetensors_file"], "rb") as fh,
            safe_open(entry["safetensors_file"], "pt") as st,
        ):
            raw = (
                st.get_tensor(entry["weight_name"]).contiguous().view(torch.uint8).numpy().tobytes()
            )
            match = [
                (o, n) for f, o, n in hinted if f == entry["safetensors_file"] and n == len(raw)
            ]
            assert any(fh.seek(o) is not None and fh.read(n) == raw for o, n in match), name
