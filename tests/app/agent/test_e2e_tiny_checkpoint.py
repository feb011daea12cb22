"""The agent on a real tiny K3 checkpoint: real weights, tokenizer, XTML format and engine.

The weights are random, so the model's words are noise; what is checked is the plumbing a
user relies on: tools are declared in the prompt the engine really prefilled, a history with
tool calls and results (made by a scripted turn) renders and runs on the real engine, and
every turn is logged.
"""

from __future__ import annotations

import pytest
from stubs.scripted_engine import ScriptedEngine, call, reply

from k3chat.agent import AutoApprover, make_agent
from k3chat.conversation import Conversation
from k3chat.events import TurnEnd
from k3chat.session import SessionStore
from k3chat_model.events import Message, SamplingParams, Stats, ToolCallParsed


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    import torch

    from k3chat_model.engine import Engine
    from k3chat_model.testing import make_checkpoint

    torch.set_num_threads(2)
    path = make_checkpoint(tmp_path_factory.mktemp("ckpt") / "k3-tiny", preset="k3-tiny", seed=0)
    return Engine.load(path)


@pytest.mark.slow
def test_agent_turn_with_tools_declared_and_a_tool_history_runs_on_the_real_engine(
    engine, project, tmp_path
):
    assert engine.supports_tools
    store = SessionStore(tmp_path / "s")
    session = store.create(
        model_id=engine.model_id, config_hash=engine.config_hash, cwd=str(project)
    )
    # two tools keep the prompt short: prefill on the tiny model is slow on 2 shared CPUs
    agent = make_agent(
        [project],
        mode="ask",
        approver=AutoApprover(),
        session=session,
        tools=["read_file", "list_dir"],
    )
    # a scripted first turn leaves real tool calls and results in the log
    scripted = ScriptedEngine(
        [reply("", call("read_file", path="README.md"), call("list_dir")), "A demo project."]
    )
    list(
        Conversation(scripted, session, sampling=SamplingParams(max_tokens=64), agent=agent).send(
            "what is this?"
        )
    )
    conv = Conversation.resume(
        engine,
        store.open(session.id),
        agent=agent,
        max_steps=1,
        sampling=SamplingParams(max_tokens=8, temperature=0.8, seed=0),
    )
    history = conv.messages
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    events = list(conv.send("thanks"))
    stats = next(e for e in events if isinstance(e, Stats))
    prompt = [*history, Message("user", "thanks")]
    assert stats.prompt_tokens == engine.count_message_tokens(prompt, agent.declarations())
    assert stats.prompt_tokens > engine.count_message_tokens(prompt) + 200
    assert stats.completion_tokens > 0
    assert isinstance(events[-1], TurnEnd)
    calls = [e for e in events if isinstance(e, ToolCallParsed)]
    logged = [e["type"] for e in store.open(session.id).events()]
    assert logged.count("tool_result") == 2 + len(calls)
    assert logged[-1] in ("assistant", "tool_result")
