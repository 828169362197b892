"""Free-form LLM tasks through the real build-env: the model's solution and failure cases run only in
containers; a task whose verifier also rewards a failure case (a reward hack the model left open) is
rejected there, naming the failure case, and a sound one is kept and published."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from openforgerl.synth.families import FAMILIES
from openforgerl.synth.llm import LlmSettings
from openforgerl.synth.pipeline import SynthConfig, synthesize
from openforgerl.testing.openai_stub import ScriptedChatServer

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "synth"))
from toy import toy_asset  # noqa: E402

pytestmark = pytest.mark.docker


def proposal(verifier: dict, target: str, instruction: str) -> str:
    return json.dumps({"params": {
        "title": f"Copy beta to {target}", "instruction": instruction,
        "verifier": verifier, "solution": f"mkdir -p /app/out && cp /app/beta.txt /app/out/{target}",
        "failure_cases": {"wrong_note": f"mkdir -p /app/out && cp /app/alpha.txt /app/out/{target}",
                          "empty_file": f"mkdir -p /app/out && touch /app/out/{target}"}}})


def test_build_env_runs_the_models_failure_cases_and_rejects_a_verifier_they_pass(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(FAMILIES.builtins, "claw.toy.copy", "toy:CopyNote")
    asset = toy_asset(tmp_path / "assets" / "toy")
    sound = proposal({"type": "file_contains", "path": "/app/out/b.txt", "text": "second note"}, "b.txt",
                     "Copy beta.txt to /app/out/b.txt (it says: second note).")
    lax = proposal({"type": "file_exists", "path": "/app/out/c.txt"}, "c.txt",  # any file passes
                   "Your colleague needs the beta note: put an identical copy at /app/out/c.txt, please.")
    with ScriptedChatServer([sound, lax], model="strong") as server:
        llm = LlmSettings(base_url=server.base_url, model="strong", mode="freeform")
        config = SynthConfig(assets=[str(asset.root)], n=2, out=str(tmp_path / "out"), proposer="llm", llm=llm,
                             max_proposals=2, build_env={"push": False, "repeats": 1, "rounds": 0})
        result = asyncio.run(synthesize(config))
    by_index = {c.index: c for c in result.candidates}
    assert by_index[0].decision == "kept", by_index[0].reason
    assert by_index[1].decision == "rejected" and by_index[1].reason_code.startswith("build")
    assert "failure wrong_note check" in by_index[1].reason and "rewards doing the task wrong" in by_index[1].reason
    validation = json.loads(json.dumps(__import__("tomllib").loads(
        (result.out / by_index[0].path / "task.toml").read_text())["validation"]))
    assert validation["passed"] and validation["failure_rewards"] == {"empty_file": [0.0], "wrong_note": [0.0]}
