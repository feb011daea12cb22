"""`k3chat --help` matches the README, and the `k3chat model` subcommands do what they say."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
from clihelp import REPO, k3, k3env

from k3chat import cli


def _readme_use_block() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Use", 1)[1].split("\n## ", 1)[0]
    return "\n".join(re.findall(r"```bash\n(.*?)```", section, re.S))


def test_every_option_the_readme_shows_is_in_help(tmp_path):
    block = _readme_use_block()
    flags = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", block))
    assert {"-p", "--resume", "-c", "--model", "--quantize"} <= flags  # the parse found them
    out = k3(tmp_path / "h", "--help")
    assert out.returncode == 0
    help_text = out.stdout.decode()
    missing = [f for f in sorted(flags) if not re.search(rf"(?<![\w-]){re.escape(f)}\b", help_text)]
    assert missing == []
    # the subcommand lines: every word after `k3chat sessions` / `k3chat model` is accepted
    for group in ("sessions", "model"):
        line = re.search(rf"k3chat {group} ([a-z |]+)", block).group(1)
        for cmd in (w.strip() for w in line.split("|")):
            r = k3(tmp_path / "h", group, cmd, "--help")
            assert r.returncode == 0, (group, cmd, r.stderr.decode())


def test_help_documents_every_option_the_parser_accepts():
    parser = cli.build_parser()
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{action.option_strings} has no help text"
    # the settings keys are exactly the long flags (docs/app.md "Settings")
    from k3chat import config

    longs = {s[2:].replace("-", "_") for a in parser._actions for s in a.option_strings}
    assert set(config.DEFAULTS) - longs == set()


def test_model_list_names_the_default(tmp_path):
    r = k3(tmp_path / "h", "model", "list")
    assert r.returncode == 0 and r.stdout.decode().startswith("k3-smol")


@pytest.mark.slow
def test_model_info_loads_a_checkpoint_and_describes_it(tmp_path, tiny_checkpoints):
    env = k3env(tmp_path / "h")
    del env["K3CHAT_FAKE_ENGINE"]
    r = k3(tmp_path / "h", "model", "info", str(tiny_checkpoints["k3-tiny"]), env=env)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert "model: k3-tiny" in out and re.search(r"context: \d+ tokens", out)
    assert "weights:" in out


def _no_network_env(home):
    env = k3env(home)
    env.update(PIP_INDEX_URL="http://127.0.0.1:9/", PIP_RETRIES="0", PIP_NO_INPUT="1")
    return env


def test_model_build_uses_the_given_source(tmp_path):
    missing = tmp_path / "nowhere" / "smol.gguf"
    r = k3(
        tmp_path / "h",
        "model",
        "build",
        "--source",
        str(missing),
        env=_no_network_env(tmp_path / "h"),
    )
    assert r.returncode == 1
    assert f"k3-smol source not found: {missing}" in r.stderr.decode()


def test_model_build_uses_the_source_from_the_environment(tmp_path):
    missing = tmp_path / "env-source.whl"
    env = _no_network_env(tmp_path / "h")
    env["K3CHAT_SMOL_SOURCE"] = str(missing)
    r = k3(tmp_path / "h", "model", "build", env=env)
    assert r.returncode == 1
    assert f"k3-smol source not found: {missing}" in r.stderr.decode()


def test_model_build_of_a_finished_build_only_reports_it(tmp_path):
    from k3chat_model import default_model as dm

    home = tmp_path / "h"
    target = home / "models" / "k3-smol"
    target.mkdir(parents=True)
    (target / dm.MARKER).write_text(json.dumps({"build_hash": dm.build_hash()}))
    r = k3(home, "model", "build", "--source", str(tmp_path / "unused"))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().strip() == f"ready: k3-smol at {target}"


def test_model_build_refuses_other_names(tmp_path):
    r = k3(tmp_path / "h", "model", "build", "llama")
    assert r.returncode == 2 and "invalid choice: 'llama'" in r.stderr.decode()


def test_model_distill_without_the_module_is_a_clear_error(monkeypatch, capsys):
    # an install without the distill package (the name is what cli imports)
    monkeypatch.setattr(cli, "DISTILL_MODULE", "k3chat_model.distill.not_installed_cli")
    assert cli.main(["model", "distill", "run", "--steps", "3"]) == 1
    err = capsys.readouterr().err
    assert "`k3chat model distill` is not available" in err and "Traceback" not in err


def test_model_distill_forwards_every_argument(tmp_path, monkeypatch):
    # a stand-in distill CLI module, found first on sys.path, records what it was given
    pkg = tmp_path / "shadow" / "k3chat_model" / "distill"
    pkg.mkdir(parents=True)
    (pkg / "cli.py").write_text(
        textwrap.dedent(
            """
            import json, os, sys
            def main(argv):
                with open(os.environ["DISTILL_RECORD"], "w") as f:
                    json.dump(argv, f)
                return 3
            """
        )
    )
    record = tmp_path / "argv.json"
    env = k3env(tmp_path / "h", DISTILL_RECORD=str(record))
    # keep the real k3chat_model package, and extend its distill package path with the stand-in
    code = (
        "import sys, k3chat_model.distill as d; "
        f"d.__path__.insert(0, {str(pkg)!r}); "
        "from k3chat.cli import main; sys.exit(main(sys.argv[1:]))"
    )

    r = subprocess.run(
        [sys.executable, "-c", code, "model", "distill", "--help", "--out", "x y"],
        env=env,
        capture_output=True,
        cwd=str(tmp_path),
        timeout=60,
    )
    assert r.returncode == 3, r.stderr.decode()

    assert json.loads(record.read_text()) == ["--help", "--out", "x y"]
