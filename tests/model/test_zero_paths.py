"""The shortcuts for zero AttnRes queries and zero routed-expert outputs (k3-smol's step-0 form).

They must give exactly what the full computation gives, switch off as soon as the weight is no
longer zero (a trained or loaded value), and never cut a gradient that training needs.
"""

from __future__ import annotations

import pytest
import torch

from k3chat_model.layers import attnres
from k3chat_model.layers.attnres import Blocks, attn_res, uniform_blend
from k3chat_model.layers.moe import SparseMoE
from k3chat_model.layers.zero import is_zero
from k3chat_model.loading import load_model


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n_blocks", [0, 1, 3, 6])
def test_uniform_blend_is_bitwise_the_full_blend_with_a_zero_query(dtype, n_blocks):
    g = torch.Generator().manual_seed(n_blocks)
    H = 96
    prefix = (torch.randn(2, 37, H, generator=g) * 3).to(dtype)
    blocks = [
        (torch.randn(2, 37, H, generator=g) * s).to(dtype)
        for s in (1.0, 5.0, 0.1, 2.0, 9.0, 0.5)[:n_blocks]
    ]
    full = attn_res(prefix, blocks, torch.randn(H, generator=g), torch.zeros(1, H), 1e-5)
    assert torch.equal(uniform_blend(prefix, blocks), full)


def test_blocks_shared_by_several_sites_give_each_site_the_full_blend():
    g = torch.Generator().manual_seed(7)
    blocks = Blocks(
        (torch.randn(1, 11, 32, generator=g) * s).to(torch.bfloat16) for s in (1.0, 4.0, 0.3)
    )
    for _ in range(3):  # later sites reuse the sum over the blocks, with a new prefix each
        prefix = torch.randn(1, 11, 32, generator=g).to(torch.bfloat16)
        full = attn_res(prefix, blocks, torch.ones(32), torch.zeros(1, 32), 1e-5)
        assert torch.equal(uniform_blend(prefix, blocks), full)
    assert blocks.uniform_partial is not None
    blocks.append(prefix)  # a changed list is summed afresh, not served a stale sum
    assert torch.equal(
        uniform_blend(prefix, blocks),
        attn_res(prefix, blocks, torch.ones(32), torch.zeros(1, 32), 1e-5),
    )


def tiny_site(weight: torch.Tensor) -> attnres.AttnResSite:
    site = attnres.AttnResSite(weight.shape[1], 1e-5).requires_grad_(False)
    site.norm_weight.copy_(1 + 0.1 * torch.randn(weight.shape[1]))
    site.proj_weight.copy_(weight)
    return site


def test_a_site_takes_the_shortcut_only_while_its_query_is_zero(monkeypatch):
    calls = []
    real = attnres.attn_res
    monkeypatch.setattr(attnres, "attn_res", lambda *a: calls.append(1) or real(*a))
    site = tiny_site(torch.zeros(1, 16))
    prefix, blocks = torch.randn(1, 5, 16), [torch.randn(1, 5, 16), torch.randn(1, 5, 16)]
    site(prefix, blocks)
    assert calls == []
    # an in-place write (load_state_dict, an optimizer step) is seen at the next call
    site.proj_weight.copy_(torch.randn(1, 16))
    out = site(prefix, blocks)
    assert calls == [1]
    assert not torch.equal(out, uniform_blend(prefix, blocks))


def test_a_zero_query_that_trains_still_gets_its_gradient():
    site = tiny_site(torch.zeros(1, 16)).requires_grad_(True)
    prefix, blocks = torch.randn(1, 5, 16), [torch.randn(1, 5, 16) * 4]
    site(prefix, blocks).pow(2).sum().backward()
    assert site.proj_weight.grad is not None and site.proj_weight.grad.abs().sum() > 0


def test_is_zero_treats_a_meta_weight_as_nonzero():
    assert not is_zero(torch.zeros(4, device="meta"), {})


@pytest.fixture()
def tiny_moe(tiny_checkpoints) -> SparseMoE:
    model = load_model(tiny_checkpoints["k3-tiny"], dtype=torch.float32)
    return next(
        layer.block_sparse_moe for layer in model.model.layers if hasattr(layer, "block_sparse_moe")
    )


def test_a_zero_routed_path_is_skipped_and_the_output_is_bitwise_unchanged(tiny_moe, monkeypatch):
    tiny_moe.routed_expert_up_proj.weight.zero_()
    x = torch.randn(2, 9, tiny_moe.routed_expert_up_proj.weight.shape[0])
    with torch.no_grad():
        monkeypatch.setattr(SparseMoE, "routed_path_is_off", lambda self: False)
        full = tiny_moe(x)
        monkeypatch.undo()
        ran = []
        tiny_moe.gate.register_forward_hook(lambda *a: ran.append(1))
        fast = tiny_moe(x)
        assert ran == [] and torch.equal(fast, full)
        # a loaded (nonzero) up-projection turns the routed path back on
        tiny_moe.routed_expert_up_proj.weight.copy_(
            torch.randn_like(tiny_moe.routed_expert_up_proj.weight)
        )
        assert not torch.equal(tiny_moe(x), full) and ran == [1]


def test_routed_experts_that_train_from_zero_still_get_gradients(tiny_moe):
    up = tiny_moe.routed_expert_up_proj.weight
    with torch.no_grad():
        up.zero_()
    up.requires_grad_(True)
    x = torch.randn(2, 9, up.shape[0])
    tiny_moe(x).pow(2).sum().backward()
    assert up.grad is not None and up.grad.abs().sum() > 0
