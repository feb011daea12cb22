"""k3chat_model: a PyTorch engine for the Kimi K3 architecture (and Kimi Linear)."""

import os

# Idle OpenMP workers sleep instead of spinning. With any other busy process on the machine,
# spinning made 2-thread prefill 40x slower (8 vs 324 tok/s, docs/benchmarks.md). Only takes
# effect when this package is imported before torch; set OMP_WAIT_POLICY yourself to override.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
