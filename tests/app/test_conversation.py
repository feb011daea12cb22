import threading

from stubs.fake_engine import FakeEngine, tool_call

from k3chat.conversation import INTERRUPTED_TOOL_RESULT, Conversation
from k3chat.events import Compacted, ToolFinished, ToolStarted, TurnEnd
from k3chat.session import SessionStore
from k3chat_model.events import SamplingParams, TextDelta


def _session(tmp_path):
    return SessionStore(tmp_path / "s").create(
        name=None, model_id="fake", config_hash="fake-hash-1", cwd="/w"
    )


def _conv(engine, session, **kw):
    return Conversation(engine, session, sampling=SamplingParams(max_tokens=64), **kw)


def _text(events):
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _as_tuples(msgs):
    return [(m.role, m.content, m.name, m.tool_index, [c.name for c in m.tool_calls]) for m in msgs]


def test_turn_is_logged_and_resume_restores_what_the_model_saw(tmp_path):
    s = _session(tmp_path)
    eng = FakeEngine(script=["Hello there friend", "Second answer"])
    c = _conv(eng, s, system="be brief")
    assert _text(c.send("hi")) == "Hello there friend"
    list(c.send("again"))
    types = [e["type"] for e in s.events()]
    assert types == ["session", "system", "user", "assistant", "user", "assistant"]
    eng2 = FakeEngine()
    r = Conversation.resume(
        eng2, SessionStore(tmp_path / "s").open(s.id), sampling=SamplingParams()
    )
    assert _as_tuples(r.messages) == _as_tuples(c.messages)
    assert r.messages[0].content == "be brief"
    assert eng2.loaded_state
    # the snapshot covers the history, so the next turn prefills only the new message
    list(r.send("third"))
    assert eng2.prefilled[-1] < 10


def test_resume_without_snapshot_reprefills_the_same_messages(tmp_path):
    s = _session(tmp_path)
    c = _conv(FakeEngine(), s)
    list(c.send("one two three"))
    import shutil

    shutil.rmtree(s.state_dir)
    eng2 = FakeEngine()
    r = Conversation.resume(eng2, s, sampling=SamplingParams())
    assert not eng2.loaded_state
    list(r.send("next"))
    assert eng2.calls[-1][:-1] == c.messages
    assert eng2.prefilled[-1] == eng2.count_message_tokens(eng2.calls[-1])


def test_snapshot_of_another_model_is_ignored_with_a_warning(tmp_path):
    s = _session(tmp_path)
    list(_conv(FakeEngine(), s).send("hi"))
    r = Conversation.resume(FakeEngine(config_hash="other"), s, sampling=SamplingParams())
    assert any("snapshot not used" in w for w in r.warnings)
    assert [m.role for m in r.messages] == ["user", "assistant"]


def test_ctrl_c_keeps_partial_reply_marked_interrupted(tmp_path):
    s = _session(tmp_path)
    eng = FakeEngine(script=["one two three four five six"])
    c = _conv(eng, s)
    cancel = threading.Event()
    seen = []
    for ev in c.send("go", cancel=cancel):
        seen.append(ev)
        if isinstance(ev, TextDelta) and len([e for e in seen if isinstance(e, TextDelta)]) == 2:
            cancel.set()
    end = seen[-1]
    assert isinstance(end, TurnEnd) and end.interrupted and end.text == "one two"
    last = s.events()[-1]
    assert last["type"] == "assistant" and last["status"] == "interrupted"
    assert last["content"] == "one two"
    r = Conversation.resume(FakeEngine(), s, sampling=SamplingParams())
    assert r.messages[-1].content == "one two"
    assert r.transcript.interrupted_at == [1]


def test_keyboard_interrupt_mid_stream_still_logs_partial(tmp_path):
    s = _session(tmp_path)
    c = _conv(FakeEngine(script=["a b c d"]), s)
    gen = c.send("go")
    n = 0
    try:
        for ev in gen:
            if isinstance(ev, TextDelta):
                n += 1
                if n == 2:
                    gen.throw(KeyboardInterrupt)
    except KeyboardInterrupt:
        pass
    last = s.events()[-1]
    assert last["status"] == "interrupted" and last["content"] == "a b"


def test_kill_after_user_message_resumes_with_interrupted_reply(tmp_path):
    s = _session(tmp_path)
    c = _conv(FakeEngine(), s)
    list(c.send("first"))
    s.append("user", content="second, then the process died")
    r = Conversation.resume(FakeEngine(), s, sampling=SamplingParams())
    assert [m.role for m in r.messages] == ["user", "assistant", "user", "assistant"]
    assert r.messages[-1].content == ""
    assert s.events()[-1]["status"] == "interrupted"
    list(r.send("third"))
    assert r.messages[-1].role == "assistant"


def _agent(tmp_path):
    """The real agent (registry + executor) over a one-file workspace."""
    from k3chat.agent import make_agent

    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    (root / "a.txt").write_text("hi from a\n")
    (root / "b").write_text("bee\n")
    return make_agent([root], mode="yolo")


def test_agent_loop_runs_tools_and_logs_results(tmp_path):
    s = _session(tmp_path)
    eng = FakeEngine(script=[[tool_call("read_file", path="a.txt")], "The file says hi"])
    c = _conv(eng, s, agent=_agent(tmp_path))
    evs = list(c.send("read a.txt"))
    assert any(isinstance(e, ToolStarted) for e in evs)
    fin = next(e for e in evs if isinstance(e, ToolFinished))
    assert fin.ok and fin.output.startswith("1\thi from a")
    assert evs[-1].text == "The file says hi"
    assert [m.role for m in c.messages] == ["user", "assistant", "tool", "assistant"]
    assert eng.calls[1][-1].role == "tool" and eng.calls[1][-1].tool_index == 1
    types = [e["type"] for e in s.events()]
    assert types[-4:] == ["assistant", "tool_call", "tool_result", "assistant"]


def test_dangling_tool_call_is_repaired_on_resume(tmp_path):
    s = _session(tmp_path)
    eng = FakeEngine(
        script=[[tool_call("read_file", path="a"), tool_call("read_file", 2, path="b")]]
    )
    c = _conv(eng, s, agent=_agent(tmp_path), max_steps=1)
    gen = c.send("read")
    for ev in gen:
        if isinstance(ev, ToolStarted):
            break  # the process "dies" while the first tool runs
    gen.close()
    r = Conversation.resume(
        FakeEngine(), SessionStore(tmp_path / "s").open(s.id), sampling=SamplingParams()
    )
    tools = [m for m in r.messages if m.role == "tool"]
    assert [t.tool_index for t in tools] == [1, 2]
    assert all(t.content == INTERRUPTED_TOOL_RESULT for t in tools)
    assert r.transcript.unanswered_calls() == []


def test_compact_replaces_older_turns_and_survives_resume(tmp_path):
    s = _session(tmp_path)
    eng = FakeEngine()
    c = _conv(eng, s, system="sys", keep_turns=1)
    for i in range(4):
        list(c.send(f"question {i}"))
    evs = list(c.compact())
    comp = next(e for e in evs if isinstance(e, Compacted))
    assert comp.removed_messages == 6
    msgs = c.messages
    assert msgs[0].role == "system" and "Summary of the earlier part" in msgs[0].content
    assert [m.content for m in msgs[1:2]] == ["question 3"]
    r = Conversation.resume(FakeEngine(), s, sampling=SamplingParams())
    assert _as_tuples(r.messages) == _as_tuples(msgs)
    assert any(e["type"] == "user" and e["content"] == "question 0" for e in s.events())


def test_auto_compaction_lets_a_session_go_past_the_context(tmp_path):
    s = _session(tmp_path)
    eng = FakeEngine(context_length=300, reply_words=30)
    c = Conversation(eng, s, sampling=SamplingParams(max_tokens=40), keep_turns=1)
    words = " ".join(["word"] * 30)
    for i in range(15):
        list(c.send(f"turn {i} {words}"))
    assert any(e["type"] == "compaction" for e in s.events())
    assert c.count_context() <= 300
    assert c.messages[-2].content.startswith("turn 14")


def test_no_session_mode_keeps_messages_in_memory_only(tmp_path):
    c = _conv(FakeEngine(), None)
    list(c.send("hi"))
    assert [m.role for m in c.messages] == ["user", "assistant"]
