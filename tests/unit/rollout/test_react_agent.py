"""forge-react's tool calls: what a named tool_choice sends, and write_file without content."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from openforgerl.rollout.harnesses import make_harness

AGENT = Path(__file__).parents[3] / "openforgerl" / "rollout" / "harnesses" / "react_agent.py"


def load_agent():
    spec = importlib.util.spec_from_file_location("forge_react_under_test", AGENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_write_file_without_content_creates_an_empty_file_and_a_missing_path_is_an_observation(tmp_path: Path):
    agent = load_agent()
    target = tmp_path / "sub" / "notes.txt"
    observation, finished = agent.call_tool("write_file", json.dumps({"path": str(target)}), 5)
    assert target.read_text() == "" and not finished and "wrote 0 characters" in observation
    observation, _ = agent.call_tool("write_file", json.dumps({"content": "x"}), 5)
    assert observation == "error: missing argument 'path'"


def test_tool_choice_may_name_a_tool():
    harness = make_harness("react", tool_choice="write_file", max_turns=1)
    assert harness.options.tool_choice == "write_file"
    agent = load_agent()
    args = agent.parse_args(["do it", "--tool-choice", "write_file"])
    assert args.tool_choice == "write_file"
    assert "write_file" in [tool["function"]["name"] for tool in agent.TOOLS]
