from types import SimpleNamespace

from k3chat.agent import AutoApprover
from k3chat.cli import make_agent


def _opts(agent=None, interactive=True):
    return {"agent": agent, "_interactive": interactive, "approval_mode": "ask", "add_dir": []}


def test_tools_default_on_only_for_natively_tool_calling_models_in_interactive_modes(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    native, prompted = SimpleNamespace(native_tools=True), SimpleNamespace(native_tools=False)
    approver = AutoApprover(False)
    assert make_agent(_opts(), approver, None, native) is not None
    assert make_agent(_opts(), approver, None, prompted) is None
    assert make_agent(_opts(interactive=False), approver, None, native) is None
    assert make_agent(_opts(agent=True), approver, None, prompted) is not None
    assert make_agent(_opts(agent=False), approver, None, native) is None
