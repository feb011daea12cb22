from __future__ import annotations

from agent_helpers import call

from k3chat.agent import Tool, ToolRegistry, default_registry
from k3chat.agent.tools.base import ToolResult, object_schema
from k3chat_model.events import ToolCall


def test_default_registry_declares_every_tool_in_a_stable_order():
    names = default_registry().names()
    assert names == [
        "glob",
        "grep",
        "list_dir",
        "read_file",
        "edit_file",
        "write_file",
        "run_shell",
    ]
    decl = default_registry().declarations()[3]
    assert decl["type"] == "function" and decl["function"]["name"] == "read_file"
    assert decl["function"]["parameters"]["required"] == ["path"]


def test_a_new_tool_is_one_small_class(make_executor):
    class Echo(Tool):
        name = "echo"
        description = "Echo text back."
        parameters = object_schema({"text": {"type": "string"}}, ["text"])

        def run(self, args, ctx):
            return ToolResult(args["text"].upper())

    ex = make_executor()
    ex.registry = ToolRegistry([*default_registry(), Echo()])
    assert "echo" in ex.registry.names()
    assert ex.run(call("echo", text="hi")).content == "HI"


def test_read_file_numbers_lines_and_honours_a_range(make_executor, project):
    (project / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = make_executor().run(call("read_file", path="n.txt", start_line=3, end_line=5))
    assert out.ok
    assert out.content.splitlines()[:3] == ["3\tline 3", "4\tline 4", "5\tline 5"]
    assert "line 6" not in out.content


def test_read_file_pages_long_files(make_executor, project):
    (project / "big.txt").write_text("".join(f"l{i}\n" for i in range(1, 1001)))
    out = make_executor(max_lines=10_000, max_chars=1 << 20).run(call("read_file", path="big.txt"))
    assert out.content.splitlines()[-1].endswith("pass start_line=401 for more]")


def test_read_file_errors_are_results_the_model_can_read(make_executor):
    ex = make_executor()
    missing = ex.run(call("read_file", path="nope.py"))
    assert not missing.ok and missing.content == "error: nope.py: no such file"
    assert "is a directory" in ex.run(call("read_file", path="src")).content


def test_list_dir_marks_directories(make_executor):
    out = make_executor().run(call("list_dir"))
    assert out.content.splitlines() == ["src/", "README.md  19"]


def test_glob_matches_across_directories(make_executor, project):
    (project / "src" / "pkg").mkdir()
    (project / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    out = make_executor().run(call("glob", pattern="**/*.py"))
    assert out.content.splitlines() == ["src/app.py", "src/pkg/mod.py"]
    assert make_executor().run(call("glob", pattern="*.py", path="src")).content == "app.py"


def test_grep_reports_file_line_and_text(make_executor, project):
    out = make_executor().run(call("grep", pattern=r"return \d", glob="*.py"))
    assert out.content == "src/app.py:2:     return 1"
    assert make_executor().run(call("grep", pattern="HELLO", ignore_case=True)).content == (
        "README.md:2: hello world"
    )
    bad = make_executor().run(call("grep", pattern="("))
    assert not bad.ok and bad.content.startswith("error: invalid regular expression")


def test_write_file_creates_parents_and_returns_a_diff(make_executor, project):
    out = make_executor().run(call("write_file", path="new/dir/x.txt", content="a\nb\n"))
    assert out.ok
    assert (project / "new/dir/x.txt").read_text() == "a\nb\n"
    assert out.content.startswith("created new/dir/x.txt (+2 -0)")
    assert "+++ b/new/dir/x.txt" in out.content


def test_edit_file_replaces_a_unique_string_and_shows_the_diff(make_executor, project):
    out = make_executor().run(
        call("edit_file", path="src/app.py", old_string="return 1", new_string="return 2")
    )
    assert out.ok, out.content
    assert (project / "src/app.py").read_text() == "def main():\n    return 2\n"
    assert "-    return 1\n+    return 2" in out.content


def test_edit_file_refuses_ambiguous_and_missing_matches(make_executor, project):
    f = project / "dup.txt"
    f.write_text("x = 1\nx = 1\n")
    ex = make_executor()
    amb = ex.run(call("edit_file", path="dup.txt", old_string="x = 1", new_string="x = 2"))
    assert not amb.ok and "matches 2 places" in amb.content
    assert f.read_text() == "x = 1\nx = 1\n"
    miss = ex.run(call("edit_file", path="dup.txt", old_string="y", new_string="z"))
    assert not miss.ok and "not found" in miss.content
    both = ex.run(
        call("edit_file", path="dup.txt", old_string="x = 1", new_string="x = 2", replace_all=True)
    )
    assert both.ok and f.read_text() == "x = 2\nx = 2\n"


def test_arguments_are_checked_against_the_schema(make_executor):
    ex = make_executor()
    missing = ex.run(call("read_file"))
    assert (
        missing.content
        == "error: invalid arguments for read_file: missing required argument 'path'"
    )
    extra = ex.run(call("read_file", path="README.md", mode="r"))
    assert "unknown argument 'mode'" in extra.content
    typed = ex.run(call("read_file", path="README.md", start_line="3"))
    assert "argument 'start_line' must be integer, got string" in typed.content
    # a JSON number with an integral value is fine for an integer parameter
    assert ex.run(call("read_file", path="README.md", start_line=2.0)).ok


def test_malformed_and_unknown_calls_become_error_results(make_executor):
    ex = make_executor()
    bad = ex.run(ToolCall(name="read_file", arguments={}, error="unterminated <argument>"))
    assert not bad.ok and "malformed tool call: unterminated <argument>" in bad.content
    unknown = ex.run(call("delete_everything"))
    assert not unknown.ok and "unknown tool 'delete_everything'" in unknown.content


def test_a_crashing_tool_is_an_error_result_not_an_exception(make_executor):
    class Boom(Tool):
        name = "boom"

        def run(self, args, ctx):
            raise RuntimeError("kaput")

    ex = make_executor()
    ex.registry.register(Boom())
    out = ex.run(call("boom"))
    assert not out.ok and out.content == "error: internal error in boom: RuntimeError: kaput"


def test_outcome_event_fields_are_json_safe(make_executor):
    import json

    fields = make_executor().run(call("list_dir")).event_fields()
    assert json.loads(json.dumps(fields))["name"] == "list_dir"


def test_make_agent_can_offer_a_subset_of_tools(project):
    import pytest

    from k3chat.agent import make_agent

    agent = make_agent([project], tools=["read_file", "grep"])
    assert [d["function"]["name"] for d in agent.declarations()] == ["grep", "read_file"]
    assert "unknown tool 'run_shell'" in agent.executor.run(call("run_shell", command="ls")).content
    with pytest.raises(ValueError, match="unknown tools \\['rm'\\]"):
        make_agent([project], tools=["rm"])
