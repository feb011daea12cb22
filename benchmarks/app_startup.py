"""Time the real `k3chat --plain` under a pseudo-terminal: start → prompt, send → first token.

    python benchmarks/app_startup.py [--model k3-smol] [--repeats 3]

Runs the installed program exactly as a user would (its own process, a real pty), on an
already-built model, and prints a markdown table of medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "app"))
from ptyproc import PtyProcess  # noqa: E402


def one_run(model: str, sessions: str) -> tuple[float, float]:
    env = {**os.environ, "K3CHAT_SESSIONS_DIR": sessions, "TERM": "xterm"}
    t0 = time.perf_counter()
    p = PtyProcess(
        [sys.executable, "-m", "k3chat", "--plain", "--model", model, "--no-agent"],
        env,
        os.getcwd(),
    )
    try:
        p.expect("> ", timeout=300)
        t_prompt = time.perf_counter() - t0
        t1 = time.perf_counter()
        p.sendline("What is the capital of France?")
        # the accepted input line, a newline, then the first streamed word of the reply
        p.expect(r"capital of France\?\n[A-Za-z]{2,}", timeout=300)
        t_first = time.perf_counter() - t1
        p.sendline("/quit")
        p.wait(60)
    finally:
        if p.alive():
            p.kill(9)
    return t_prompt, t_first


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="k3-smol")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"<!-- nproc={os.cpu_count()} load={load[0]:.2f} python={sys.version.split()[0]} -->")
    with tempfile.TemporaryDirectory() as d:
        runs = [one_run(args.model, d) for _ in range(args.repeats)]
    print("| measure | median s | runs |")
    print("|---|---|---|")
    print(
        f"| `k3chat --plain` start → prompt ({args.model}) | {statistics.median(r[0] for r in runs):.2f} | "
        f"{', '.join(f'{r[0]:.2f}' for r in runs)} |"
    )
    print(
        f"| send → first token | {statistics.median(r[1] for r in runs):.2f} | "
        f"{', '.join(f'{r[1]:.2f}' for r in runs)} |"
    )


if __name__ == "__main__":
    main()
