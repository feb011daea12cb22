"""run_shell: one shell command in the workspace, with a timeout and an output cap.

The command runs under `/bin/sh -c` in its own process group, in the first workspace root,
with stdin closed (a command waiting for input would otherwise hang the agent). On timeout
or user interrupt the whole group is killed, so `sleep 100 &`-style children die too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any

from k3chat.agent.tools.base import Tool, ToolContext, ToolError, ToolResult, object_schema

MAX_TIMEOUT_S = 600.0


class RunShell(Tool):
    name = "run_shell"
    description = (
        "Run a shell command (/bin/sh -c) in the workspace root and return its exit code "
        "and combined stdout/stderr. stdin is closed; interactive programs will not work. "
        f"timeout is in seconds (default 120, max {int(MAX_TIMEOUT_S)})."
    )
    parameters = object_schema(
        {
            "command": {"type": "string", "description": "The command line."},
            "timeout": {"type": "number", "minimum": 1, "maximum": MAX_TIMEOUT_S},
        },
        ["command"],
    )
    kind = "shell"

    def preview(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return args["command"]

    def summary(self, args: dict[str, Any], ctx: ToolContext) -> str:
        first = args["command"].strip().splitlines()[0] if args["command"].strip() else ""
        return f"run_shell: {first[:100]}"

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        command = args["command"]
        if not command.strip():
            raise ToolError("command is empty")
        timeout = float(args.get("timeout", ctx.shell_default_timeout))
        env = {**os.environ, "PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb"}
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=ctx.workspace.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        reader = _CappedReader(proc.stdout, ctx.shell_output_cap)
        reader.start()
        reason = _wait(proc, timeout, ctx.cancel)
        if reason:
            _kill_group(proc)
        reader.join(timeout=2)
        leftover = reader.is_alive()
        if leftover:
            # a background child still holds the pipe; the call cannot finish while it does
            _kill_group(proc)
            reader.join(timeout=2)
        output = reader.text()
        if leftover:
            output += "\n[background processes still writing output were killed]"
        if reader.dropped:
            output += f"\n[output capped: {reader.dropped} more bytes were discarded]"
        if reason == "timeout":
            head = f"timed out after {timeout:g}s; the command was killed"
        elif reason == "cancelled":
            head = "interrupted by the user; the command was killed"
        else:
            head = f"exit code {proc.returncode}"
        ok = reason is None and proc.returncode == 0
        return ToolResult(f"{head}\n{output}" if output else head, ok=ok)


def _wait(proc: subprocess.Popen, timeout: float, cancel: threading.Event | None) -> str | None:
    """Wait for exit; return "timeout"/"cancelled" when we must kill it, else None."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            proc.wait(timeout=0.05)
            return None
        except subprocess.TimeoutExpired:
            pass
        if cancel is not None and cancel.is_set():
            return "cancelled"
        if time.monotonic() >= deadline:
            return "timeout"


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL what is left after a short grace."""
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            # the leader is gone but children in its group may still hold the pipe
            os.killpg(proc.pid, signal.SIGKILL)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            continue
        return


class _CappedReader(threading.Thread):
    """Drains a pipe so the child never blocks; keeps the first `cap` bytes."""

    def __init__(self, pipe, cap: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.cap = pipe, cap
        self.buf = bytearray()
        self.dropped = 0

    def run(self) -> None:
        while chunk := self.pipe.read1(65536):
            room = self.cap - len(self.buf)
            self.buf += chunk[:room]
            self.dropped += max(0, len(chunk) - room)
        self.pipe.close()

    def text(self) -> str:
        return self.buf.decode("utf-8", errors="replace")
