"""Agent mode: tools the model can call, the approval policy, and workspace confinement.

`Conversation` (k3chat/conversation.py) declares `registry.declarations()` to the engine and
passes every parsed tool call to `executor.run(call)`; see docs/agent.md.
"""

from k3chat.agent.approval import ApprovalDecision, ApprovalKind, ApprovalRequest, Approver
from k3chat.agent.approvers import AutoApprover, CallbackApprover
from k3chat.agent.context import AgentContext, make_agent
from k3chat.agent.executor import ToolExecutor, ToolOutcome
from k3chat.agent.policy import MODES, normalize_mode
from k3chat.agent.registry import ToolRegistry, default_registry
from k3chat.agent.tools import Tool, ToolContext, ToolError, ToolResult
from k3chat.agent.workspace import ResolvedPath, Workspace

__all__ = [
    "MODES",
    "AgentContext",
    "ApprovalDecision",
    "ApprovalKind",
    "ApprovalRequest",
    "Approver",
    "AutoApprover",
    "CallbackApprover",
    "ResolvedPath",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolExecutor",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResult",
    "Workspace",
    "default_registry",
    "make_agent",
    "normalize_mode",
]
