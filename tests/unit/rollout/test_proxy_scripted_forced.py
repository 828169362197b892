"""The scripted engine continues after a forced tool-call opening, as a real model does."""

import asyncio

from openforgerl.rollout.proxy.conversation import Sampling
from openforgerl.rollout.proxy.engine import ScriptedEngineConfig, ScriptTurn
from openforgerl.rollout.proxy.engines.scripted import ScriptedEngine, already_said
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.testing.chat import CharTemplate


def test_overlap_needs_at_least_two_ids():
    assert already_said([5, 1, 2, 3], [1, 2, 3, 9]) == 3
    assert already_said([5, 7], [7, 8]) == 0
    assert already_said([], [1, 2]) == 0


def test_a_forced_opening_is_not_repeated():
    template, parser = CharTemplate(), make_tool_parser("hermes")
    turn = ScriptTurn(tool_calls=[{"name": "write_file", "arguments": {"path": "/app/x", "content": "hi"}}])
    engine = ScriptedEngine(ScriptedEngineConfig(turns=[turn]), template=template, tool_parser=parser)
    forced = template.encode(parser.forced_prefix(None))
    prompt = template.encode("<|im_start|>assistant\n")
    whole = asyncio.run(engine.generate(prompt, Sampling())).token_ids
    continued = asyncio.run(engine.generate(prompt + forced, Sampling())).token_ids
    assert forced + continued == whole
    assert template.decode(forced + continued).count("<tool_call>") == 1
