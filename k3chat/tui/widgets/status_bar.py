"""The bottom line: model, quantization, context gauge, decode speed, memory, activity."""

from __future__ import annotations

from textual.reactive import reactive
from textual.widgets import Static


def human_tokens(n: int) -> str:
    """1234 -> "1.2k"; keeps the gauge short."""
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def human_bytes(n: int) -> str:
    """Bytes in binary units with one decimal: 1.5 GiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


class StatusBar(Static):
    """Read-only summary; the screen sets the reactives, the bar re-renders itself."""

    DEFAULT_CSS = """
    StatusBar {
        dock: bottom;
        height: 1;
        padding: 0 1;
        background: $panel;
        color: $text-muted;
    }
    """

    model: reactive[str] = reactive("")
    quantization: reactive[str | None] = reactive(None)
    context_used: reactive[int] = reactive(0)
    context_limit: reactive[int] = reactive(0)
    decode_tps: reactive[float | None] = reactive(None)
    memory_bytes: reactive[int | None] = reactive(None)
    activity: reactive[str] = reactive("")
    """What is happening now ("prefill 40%", "generating", "loading model"); empty when idle."""

    def render(self) -> str:
        parts = [self.model or "no model"]
        if self.quantization:
            parts[0] += f" · {self.quantization}"
        if self.context_limit:
            pct = 100 * self.context_used / self.context_limit
            parts.append(
                f"ctx {human_tokens(self.context_used)}/{human_tokens(self.context_limit)}"
                f" ({pct:.0f}%)"
            )
        if self.decode_tps is not None:
            parts.append(f"{self.decode_tps:.1f} tok/s")
        if self.memory_bytes is not None:
            parts.append(f"mem {human_bytes(self.memory_bytes)}")
        if self.activity:
            parts.append(self.activity)
        return " │ ".join(parts)
