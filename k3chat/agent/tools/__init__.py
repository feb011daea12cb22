"""The built-in tools, one module each; `discover()` collects them.

To add a tool, drop a module here that defines one `Tool` subclass. Modules starting with
`_` hold shared helpers and are skipped.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from k3chat.agent.tools.base import Tool, ToolContext, ToolError, ToolResult

__all__ = ["Tool", "ToolContext", "ToolError", "ToolResult", "discover"]


def discover() -> list[Tool]:
    """Instantiate every concrete `Tool` subclass defined in this package's modules."""
    found: list[Tool] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Tool) and cls is not Tool and cls.__module__ == module.__name__:
                found.append(cls())
    return found
