"""The repairer: prompt in, whole-file edits out, applied only where a task may be edited."""

from __future__ import annotations

import json

import pytest

from openforgerl.envs.repair import (RepairProposal, Repairer, RepairSettings, apply_edits, parse_reply,
                                           task_files)
from openforgerl.errors import EnvBuildError
from openforgerl.tasks import Task
from openforgerl.testing.openai_stub import ScriptedChatServer

FIX = {"explanation": "solve.sh wrote bye", "edits": [{"path": "solution/solve.sh",
                                                       "content": "#!/bin/bash\necho hi > /app/hello.txt"}]}


def test_reply_in_a_code_fence_with_text_around_it_is_parsed():
    proposal = parse_reply("Here you go:\n```json\n" + json.dumps(FIX) + "\n```\nGood luck")
    assert [e.path for e in proposal.edits] == ["solution/solve.sh"]


@pytest.mark.parametrize("path", ["task.toml", "../other/tests/test.sh", "/etc/passwd", "tests", "run.sh"])
def test_a_reply_editing_outside_the_task_files_is_rejected_whole(path):
    reply = {"edits": [FIX["edits"][0], {"path": path, "content": "x"}]}
    with pytest.raises(EnvBuildError, match="tried to edit"):
        parse_reply(json.dumps(reply))


def test_a_reply_without_json_is_an_error_naming_the_reply():
    with pytest.raises(EnvBuildError, match="no JSON object"):
        parse_reply("I cannot help with that")


def test_edits_replace_whole_files_and_scripts_stay_executable(make_task):
    task_dir = make_task()
    written = apply_edits(task_dir, RepairProposal.model_validate(FIX))
    assert written == ["solution/solve.sh"]
    solve = task_dir / "solution" / "solve.sh"
    assert solve.read_text() == "#!/bin/bash\necho hi > /app/hello.txt\n" and solve.stat().st_mode & 0o111


def test_the_repairer_sends_reason_files_and_logs_and_returns_the_models_edits(make_task):
    task = Task.load(make_task())
    context = {"task_name": task.name, "round": 1, "rounds": 2, "reason": "oracle check: scored [0, 0]",
               "findings": [], "files": task_files(task), "logs": {"oracle r-1": "status=failure"}, "history": []}
    with ScriptedChatServer([json.dumps(FIX)], after_last="repeat", model="scripted-repairer") as model:
        proposal = Repairer(RepairSettings(base_url=model.base_url)).propose(context)
    assert proposal.explanation == "solve.sh wrote bye"
    [request] = model.requests
    assert request["model"] == "scripted-repairer"  # the first model the endpoint lists
    prompt = request["messages"][1]["content"]
    assert "oracle check: scored [0, 0]" in prompt and "### solution/solve.sh" in prompt and "status=failure" in prompt


def test_an_unreachable_repair_model_is_an_error_with_a_fix():
    repairer = Repairer(RepairSettings(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=2))
    with pytest.raises(EnvBuildError, match="repair model") as info:
        repairer.propose({"task_name": "t", "round": 1, "rounds": 1, "reason": "", "findings": [], "files": {},
                          "logs": {}, "history": []})
    assert "--repair-model" in str(info.value)


def test_a_repaired_dockerfile_stops_being_template_output_so_it_is_not_rendered_over(make_task):
    from openforgerl.envs.render import RENDERED_MARK, render_environment

    task_dir = make_task("mail", '[environment]\ntemplate = "claw"\n', dockerfile=None)
    render_environment(task_dir)
    repaired = (task_dir / "environment" / "Dockerfile").read_text() + "RUN apt-get install -y sqlite3\n"
    apply_edits(task_dir, RepairProposal(edits=[{"path": "environment/Dockerfile", "content": repaired}]))
    assert render_environment(task_dir) is False
    dockerfile = (task_dir / "environment" / "Dockerfile").read_text()
    assert not dockerfile.startswith(RENDERED_MARK) and dockerfile.endswith("sqlite3\n")
