"""Export a session's transcript as Markdown or JSON (from the log, the source of truth)."""

from __future__ import annotations

import json
from typing import Any

from k3chat.session import Session


def _visible(events: list[dict]) -> list[dict]:
    keep = ("user", "assistant", "tool_result", "system", "compaction")
    return [e for e in events if e.get("type") in keep]


def to_markdown(session: Session) -> str:
    m = session.meta
    title = m.get("name") or m.get("title") or session.id
    out = [
        f"# {title}",
        "",
        f"- session: `{session.id}`",
        f"- model: {m.get('model_id', '')}",
        f"- created: {m.get('created', '')}",
        "",
    ]
    for e in _visible(session.events()):
        t = e["type"]
        if t == "user":
            out += ["## User", "", e.get("content", ""), ""]
        elif t == "assistant":
            head = "## Assistant" + (" (interrupted)" if e.get("status") == "interrupted" else "")
            out += [head, ""]
            if e.get("thinking"):
                out += [
                    "<details><summary>thinking</summary>",
                    "",
                    e["thinking"],
                    "",
                    "</details>",
                    "",
                ]
            if e.get("content"):
                out += [e["content"], ""]
            for c in e.get("tool_calls") or []:
                out += [
                    f"Tool call `{c.get('name')}`:",
                    "",
                    "```json",
                    json.dumps(c.get("arguments"), indent=2, ensure_ascii=False),
                    "```",
                    "",
                ]
        elif t == "tool_result":
            out += [f"### Tool result: {e.get('name')}", "", "```", e.get("content", ""), "```", ""]
        elif t == "system" and e.get("content"):
            out += ["## System", "", e["content"], ""]
        elif t == "compaction":
            out += [
                "## Compaction",
                "",
                f"_{e.get('removed_messages', 0)} earlier messages were summarised:_",
                "",
                e.get("summary", ""),
                "",
            ]
    return "\n".join(out).rstrip() + "\n"


def to_json(session: Session) -> str:
    data: dict[str, Any] = {"meta": session.meta, "events": session.events()}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
