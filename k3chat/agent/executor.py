"""Runs one tool call: validate, confine, apply the mode, ask, run, truncate.

The agent loop in `k3chat/conversation.py` calls `ToolExecutor.run(call)` for every call
the model makes and persists the returned `ToolOutcome`. Nothing here raises for a bad
call: malformed calls, unknown tools, bad arguments, denials and tool failures all become
an outcome whose `content` tells the model what happened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k3chat.agent.approval import ApprovalDecision, ApprovalRequest, Approver
from k3chat.agent.output import OUTPUTS_DIR, save_full, truncate
from k3chat.agent.policy import always_key, mode_asks, mode_blocks, normalize_mode
from k3chat.agent.registry import ToolRegistry
from k3chat.agent.schema import validate_arguments
from k3chat.agent.tools import Tool, ToolContext, ToolError
from k3chat.agent.workspace import Workspace
from k3chat_model.events import ToolCall


@dataclass
class ToolOutcome:
    """The result of one call, as the model and the session log see it."""

    call: ToolCall
    content: str
    """What the model is given (truncated when long)."""
    full: str
    """The whole output."""
    ok: bool
    denied: bool = False
    saved_path: Path | None = None
    """Where `full` was saved when `content` is truncated."""
    approval: str = "auto"
    """How it was allowed: "auto" (mode), "user", "always", or "denied" / "refused"
    ("refused" = never reached approval: malformed, invalid or failing preview)."""

    def event_fields(self) -> dict[str, Any]:
        """Fields for the session's `tool_result` event (JSON-safe)."""
        return {
            "name": self.call.name,
            "tool_index": self.call.index,
            "call_id": self.call.id,
            "content": self.content,
            "ok": self.ok,
            "denied": self.denied,
            "approval": self.approval,
            "saved_path": str(self.saved_path) if self.saved_path else None,
        }


class ToolExecutor:
    """Applies confinement, the approval mode and truncation around the registry's tools.

    Args:
        registry: the tools the model may call.
        workspace: the roots the agent may act in freely.
        mode: "read-only" | "ask" | "auto-edit" | "yolo" ("plan" = read-only).
            Default: "ask".
        approver: who answers approval requests; None denies every request.
        session_dir: where `tool-outputs/<n>.txt` go; None keeps full outputs in memory only.
        always_allowed: keys remembered from "always" answers (see `policy.always_key`);
            the same set object is updated in place, so the caller can persist it.
        on_always: called with the set after each new "always" answer.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        workspace: Workspace,
        mode: str = "ask",
        approver: Approver | None = None,
        session_dir: Path | None = None,
        always_allowed: set[str] | None = None,
        *,
        max_chars: int = 8192,
        max_lines: int = 200,
        shell_output_cap: int = 1 << 20,
        shell_timeout: float = 120.0,
        on_always: Callable[[set[str]], None] | None = None,
    ) -> None:
        self.registry = registry
        self.workspace = workspace
        self._mode = normalize_mode(mode)
        self.approver = approver
        self.session_dir = Path(session_dir) if session_dir else None
        self.always_allowed: set[str] = always_allowed if always_allowed is not None else set()
        self.max_chars, self.max_lines = max_chars, max_lines
        self.shell_output_cap, self.shell_timeout = shell_output_cap, shell_timeout
        self.on_always = on_always

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        self._mode = normalize_mode(value)

    def run(self, call: ToolCall, *, cancel: threading.Event | None = None) -> ToolOutcome:
        """Run `call` and return what the model should be told. Never raises for bad calls."""
        if call.error:
            return self._error(
                call,
                f"malformed tool call: {call.error}. Emit the call again "
                "with one <argument> per parameter.",
            )
        tool = self.registry.get(call.name)
        if tool is None:
            names = ", ".join(self.registry.names())
            return self._error(call, f"unknown tool {call.name!r}; available tools: {names}")
        args, problems = validate_arguments(call.arguments, tool.parameters)
        if problems:
            return self._error(call, f"invalid arguments for {tool.name}: " + "; ".join(problems))
        ctx = ToolContext(
            self.workspace,
            cancel=cancel,
            shell_output_cap=self.shell_output_cap,
            shell_default_timeout=self.shell_timeout,
        )
        reasons = self._confine(tool, args, ctx)
        if mode_blocks(self._mode, tool.kind):
            return self._deny(
                call,
                f"denied: the session is in read-only (plan) mode, so "
                f"{tool.name} ({tool.kind}) is not available. Describe the "
                "change you would make instead.",
                approval="refused",
            )
        try:
            preview = tool.preview(args, ctx)
            summary = tool.summary(args, ctx)
        except ToolError as e:
            return self._error(call, str(e))
        except OSError as e:
            return self._error(call, f"{type(e).__name__}: {e}")
        if mode_asks(self._mode, tool.kind):
            reasons.append((tool.kind, f"{tool.kind} tools need approval in {self._mode} mode"))
        approval = "auto"
        if reasons:
            keys = [always_key(tool.name, kind) for kind, _ in reasons]
            if all(k in self.always_allowed for k in keys):
                approval = "always"
            else:
                decision = self._ask(tool, args, reasons, summary, preview)
                if not decision.allow:
                    text = f"denied by the user: {summary}"
                    if decision.feedback:
                        text += f"\nThe user says: {decision.feedback}"
                    return self._deny(call, text)
                approval = "user"
                if decision.always:
                    self.always_allowed.update(keys)
                    if self.on_always:
                        self.on_always(self.always_allowed)
        return self._execute(call, tool, args, ctx, approval)

    def _confine(self, tool: Tool, args: dict[str, Any], ctx: ToolContext) -> list[tuple[str, str]]:
        """Resolve path arguments into ctx.paths; return the (kind, why) approvals needed."""
        reasons: list[tuple[str, str]] = []
        outputs = self.session_dir / OUTPUTS_DIR if self.session_dir else None
        for name in tool.path_args:
            given = args.get(name, ".")
            rp = self.workspace.resolve(given)
            ctx.paths[name] = rp.path
            saved_output = outputs is not None and rp.path.is_relative_to(outputs.resolve())
            if tool.kind == "write" and rp.protected:
                reasons.append(("secret", f"{given} is {rp.protected}"))
            if not rp.inside and not (tool.kind == "read" and saved_output):
                where = "" if str(rp.path) == given else f" (resolves to {rp.path})"
                reasons.append(("outside", f"{given}{where} is outside the workspace"))
        if self._mode == "yolo":
            reasons = [r for r in reasons if r[0] == "secret"]
        order = {"secret": 0, "outside": 1}
        return sorted(reasons, key=lambda r: order[r[0]])

    def _ask(
        self, tool: Tool, args: dict, reasons: list, summary: str, preview: str | None
    ) -> ApprovalDecision:
        if self.approver is None:
            return ApprovalDecision.no("no approver is configured")
        req = ApprovalRequest(
            tool=tool.name,
            arguments=args,
            kind=reasons[0][0],
            summary=summary,
            diff=preview,
            reasons=[why for _, why in reasons],
        )
        return self.approver.decide(req)

    def _execute(
        self, call: ToolCall, tool: Tool, args: dict, ctx: ToolContext, approval: str
    ) -> ToolOutcome:
        try:
            result = tool.run(args, ctx)
            full, ok = result.output, result.ok
        except ToolError as e:
            full, ok = f"error: {e}", False
        except OSError as e:
            full, ok = f"error: {type(e).__name__}: {e}", False
        except Exception as e:  # a tool bug must not kill the agent loop
            full, ok = f"error: internal error in {tool.name}: {type(e).__name__}: {e}", False
        return self._finish(call, full, ok, approval=approval)

    def _finish(
        self, call: ToolCall, full: str, ok: bool, *, denied: bool = False, approval: str = "auto"
    ) -> ToolOutcome:
        cut = truncate(full, self.max_chars, self.max_lines)
        if cut is None:
            return ToolOutcome(call, full, full, ok, denied, None, approval)
        head, tail = cut
        saved = save_full(self.session_dir, full) if self.session_dir else None
        total = len(full.splitlines())
        where = (
            f"full output saved to {saved}; read it with read_file (line ranges) or grep"
            if saved
            else "full output not saved (no session)"
        )
        marker = (
            f"\n[... output truncated: {total} lines / {len(full)} chars in all, "
            f"showing the first {len(head.splitlines())} and last "
            f"{len(tail.splitlines())} lines; {where} ...]\n"
        )
        content = head.rstrip("\n") + marker + tail
        return ToolOutcome(call, content, full, ok, denied, saved, approval)

    def _error(self, call: ToolCall, text: str) -> ToolOutcome:
        return self._finish(call, f"error: {text}", False, approval="refused")

    def _deny(self, call: ToolCall, text: str, approval: str = "denied") -> ToolOutcome:
        return self._finish(call, text, False, denied=True, approval=approval)
