"""Stage-1 generalisation: a trained KDA layer's relative MSE on its training rows vs held-out text.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/stage1_heldout.py runs/k3smol-d12 \
        --from runs/k3smol-seed11/stage2.pt --layers 18

Why: a growth run's stage 1 interleaves one teacher-reply row after every two chat rows, and a
run with the default 192 replies (41 rows) cycles them ~39 times in 2.46M tokens while it sees
each chat row once at most. This scores the stage-1 objective, ‖ŷ − y‖² / ‖y‖² over all tokens of
a set, teacher-forced as in training, on the run's packed reply rows and chat rows, on trained
replies and on held-out ones (`RUN/data/val_assistant.json`, made once if missing) as single
conversations, and on the held-out selection chitchat. Prints a markdown table, one row per
layer. Session 20: kda11's layer 18 fits its 41 rows twice as well as other packed reply rows
(0.043 vs 0.083), but retrained on 352 rows it does no better on held-out replies (0.122 vs
0.115) or at the gate: repeated rows were not what held it back.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch

from k3chat_model.distill import ckpt
from k3chat_model.distill.data import ChatTokenizer, chitchat_conversations
from k3chat_model.distill.gate import assistant_sequences, scored_conversations
from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config
from k3chat_model.distill.kda_train import kda_forward_train
from k3chat_model.distill.pipeline import load_run
from k3chat_model.distill.stage1 import capture
from k3chat_model.distill.validation import validation_pairs
from k3chat_model.loading import load_model


@torch.no_grad()
def rel_mse(teacher, students: dict, seqs: list[list[int]]) -> dict[int, float]:  # noqa: ANN001
    """Σ‖ŷ − y‖² / Σ‖y‖² per layer over `seqs` (each run alone, no padding)."""
    err = dict.fromkeys(students, 0.0)
    ref = dict.fromkeys(students, 0.0)
    for ids in seqs:
        got = capture(teacher, torch.tensor([ids]), sorted(students))
        for i, mod in students.items():
            x, y = got[i]
            err[i] += (kda_forward_train(mod, x) - y).pow(2).sum().item()
            ref[i] += y.pow(2).sum().item()
    return {i: err[i] / max(ref[i], 1e-12) for i in students}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="run dir: its data (rows.pt, val_assistant.json)")
    ap.add_argument("--from", dest="src", type=Path, required=True,
                    help="checkpoint holding the layers (stage1.pt, stage2.pt, …)")  # fmt: skip
    ap.add_argument("--layers", required=True, help="comma-separated 0-based layers")
    ap.add_argument("--n", type=int, default=24, help="sequences per set")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg, _ = load_run(a.run)
    teacher = load_model(Path(cfg.teacher), dtype=torch.bfloat16)
    tok = ChatTokenizer(Path(cfg.teacher))
    kcfg = kda_config(teacher.config, list(range(teacher.config.num_hidden_layers)))
    saved = ckpt.load(a.src)
    layers = [int(x) for x in a.layers.split(",")]
    students = {}
    for i in layers:
        students[i] = init_kda_from_gqa(teacher.model.layers[i].self_attn, kcfg, i)
        students[i].load_state_dict(saved["layers"][i])
        students[i].eval()

    rows = torch.load(a.run / "data" / "rows.pt")
    (crow, _), (arow, _) = rows["chat"], rows["assist"]
    pairs = validation_pairs(a.run, cfg, teacher, tok)  # generated once if missing
    convs = chitchat_conversations(Path(cfg.data_dir))[-150:]
    trained = json.loads((a.run / "data" / "teacher_replies.json").read_text())
    sets = {
        "train reply rows": [r.tolist() for r in arow[: a.n]],
        "train replies": [ids for ids, _ in assistant_sequences(tok, trained[: a.n])],
        "held-out replies": [ids for ids, _ in assistant_sequences(tok, pairs)][: a.n],
        "train chat": [r.tolist() for r in crow[: a.n]],
        "held-out chat": [ids for ids, _ in scored_conversations(tok, convs)][: a.n],
    }
    res = {name: rel_mse(teacher, students, seqs) for name, seqs in sets.items()}
    load = os.getloadavg()
    print(f"nproc {os.cpu_count()}, load {load[0]:.2f}, torch {torch.__version__}, "
          f"{platform.python_version()}; {a.src}; reply rows in run: {len(arow)}")  # fmt: skip
    print("| layer | " + " | ".join(sets) + " |")
    print("|---|" + "---|" * len(sets))
    for i in layers:
        print(f"| {i} | " + " | ".join(f"{res[s][i]:.4f}" for s in sets) + " |")


if __name__ == "__main__":
    main()
