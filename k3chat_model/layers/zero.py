"""Is a weight all zeros? Asked by the layers that skip work a zero weight makes pointless
(AttnRes sites with a zero query, LatentMoE blocks with a zero up-projection)."""

from __future__ import annotations

import torch


def is_zero(weight: torch.Tensor, memo: dict) -> bool:
    """Whether `weight` is all zeros, remembered until the tensor changes.

    The key is the tensor's storage address and autograd version (bumped by every in-place
    write: `copy_`, optimizer steps), so the scan runs once per new weight, not per call (on a
    GPU it would be a host sync per layer). Edits through `.data` bypass the version: replace
    the parameter instead. A weight on the meta device (offloaded, not loaded) counts as nonzero.
    """
    if weight.device.type == "meta":
        return False
    key = (weight.data_ptr(), weight._version, weight.device)
    if memo.get("key") != key:
        memo["key"], memo["zero"] = key, not bool(weight.any())
    return memo["zero"]
