"""ForgeAgentLoop against veRL's real agent-loop types, a fake server manager and the fake runtime.

No Ray, no Docker, no GPU: veRL's ``server_manager.generate`` is a scripted stand-in (as veRL's own CPU
tests do), the sandbox is ``FakeRuntime`` whose agent makes real HTTP calls to the in-process proxy.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("verl.experimental.agent_loop.agent_loop", reason="needs the train extra (veRL 0.9.1)")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from openforgerl.errors import SandboxError, UserError  # noqa: E402
from openforgerl.rollout.harness import AgentContext, Harness, Invocation  # noqa: E402
from openforgerl.rollout.orchestrator import RolloutResult  # noqa: E402
from openforgerl.rollout.proxy.conversation import Sampling  # noqa: E402
from openforgerl.rollout.proxy.engine import ScriptedEngineConfig, ScriptTurn  # noqa: E402
from openforgerl.rollout.proxy.engines.scripted import ScriptedEngine  # noqa: E402
from openforgerl.rollout.proxy.engines.verl import VerlEngine  # noqa: E402
from openforgerl.rollout.proxy.tool_parser import make_tool_parser  # noqa: E402
from openforgerl.testing.chat import CharTemplate  # noqa: E402
from openforgerl.testing.runtime import FakeRuntime, Scenario, exits, reward  # noqa: E402
from openforgerl.testing.tasks import write_task  # noqa: E402
from openforgerl.train.verl.agent_loop import ForgeAgentLoop, segment_outputs, zero_singleton_groups  # noqa: E402
from openforgerl.train.verl.dataset import TaskSpec, export_verl_dataset  # noqa: E402

TEMPLATE = CharTemplate()
TOOLS = [{"type": "function", "function": {"name": "exec", "parameters": {"type": "object"}}}]
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def turn_ids(turn: ScriptTurn) -> list[int]:
    """The ids a policy writes for ``turn`` (its tool calls in Hermes format, then end-of-turn)."""
    engine = ScriptedEngine(ScriptedEngineConfig(), template=TEMPLATE, tool_parser=make_tool_parser("hermes"))
    return engine.turn_ids(turn)


def logprob(k: int) -> float:
    return -((k % 7) + 1) / 8  # exact in float32, as the proxy stores them


class FakeServerManager:
    """veRL's LLMServerClient as its CPU tests fake it: canned answers, every request kept."""

    def __init__(self, answers: list[list[int]]) -> None:
        self.answers = answers
        self.requests: list[tuple[str, list[int], dict[str, Any]]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data: Any = None, video_data: Any = None, audio_data: Any = None,
                       mm_processor_kwargs: Any = None, **kwargs: Any) -> TokenOutput:
        ids = self.answers[len(self.requests)]
        self.requests.append((request_id, list(prompt_ids), dict(sampling_params)))
        return TokenOutput(token_ids=ids, log_probs=[logprob(k) for k in range(len(ids))], stop_reason="completed",
                           extra_fields={"global_steps": 3, "min_global_steps": 2, "max_global_steps": 3})


class FakeTokenizer:
    """What AgentLoopBase's constructor touches (the proxy renders with CharTemplate)."""

    padding_side, pad_token_id, eos_token_id, chat_template = "left", 0, 257, "unused"

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> list[int]:
        return [1]

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        return ""


class ModelAgent(Harness):
    """The agent is whatever the fake sandbox's scenario does; it gets the proxy URL and its token."""

    name = "agent"

    def invocation(self, ctx: AgentContext) -> Invocation:
        return Invocation(["agent"], env={"OPENAI_BASE_URL": ctx.base_url, "OPENAI_API_KEY": ctx.api_key})


def three_calls_two_conversations():
    """A tool call and its follow-up (one segment), then a fresh conversation (a second segment)."""
    async def step(box, command, timeout):
        env = box.execs[-1][2]
        auth = {"authorization": f"Bearer {env['OPENAI_API_KEY']}"}
        url = env["OPENAI_BASE_URL"] + "/v1/chat/completions"
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You act."},
                                          {"role": "user", "content": "list the files"}]
        async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
            first = (await client.post(url, headers=auth, json={"model": "m", "messages": messages,
                                                                 "tools": TOOLS})).json()
            call = first["choices"][0]["message"]["tool_calls"][0]
            messages += [first["choices"][0]["message"], {"role": "tool", "tool_call_id": call["id"], "content": "a b"}]
            await client.post(url, headers=auth, json={"model": "m", "messages": messages, "tools": TOOLS})
            await client.post(url, headers=auth, json={"model": "m", "messages": [
                {"role": "system", "content": "You summarise."}, {"role": "user", "content": "a b"}]})
        return await exits(0)(box, command, timeout)
    return step


ANSWERS = [turn_ids(ScriptTurn(tool_calls=[{"name": "exec", "arguments": {"command": "ls"}}])),
           turn_ids(ScriptTurn(text="done")), turn_ids(ScriptTurn(text="two files"))]


def make_loop(tmp_path: Path, server: FakeServerManager, scenario: Scenario, *, prompt_length: int = 4096,
              response_length: int = 4096, settle_heap: bool = False, **settings: Any) -> ForgeAgentLoop:
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "prompt_length": prompt_length, "response_length": response_length,
        "multi_turn": {"tool_config_path": None}}, "model": {"path": "dummy"}}, "data": {}})
    return ForgeAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=FakeTokenizer(),
                          processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
                          runtime=FakeRuntime(scenario), harness=ModelAgent(), template=TEMPLATE,
                          run_dir=str(tmp_path / "runs"), max_sandboxes=2, settle_heap=settle_heap, **settings)


def dataset_row(tmp_path: Path, uid: str = "u1", session_id: int = 0) -> dict[str, Any]:
    """A row as veRL hands it to ``run``: RLHFDataset's item of our export, plus the V1 worker's keys."""
    task = write_task(tmp_path / "tasks", "hello")
    path = export_verl_dataset(task, tmp_path / "train.parquet", harness="react")
    dataset = RLHFDataset(data_files=[str(path)], tokenizer=FakeTokenizer(),
                          config=OmegaConf.create({"filter_overlong_prompts": False,
                                                   "cache_dir": str(tmp_path / "cache")}))
    row = dict(dataset[0])
    row.pop("agent_name")  # _run_agent_loop consumes it
    return {**row, "uid": uid, "session_id": session_id, "global_steps": 3}


def run_loop(loop: ForgeAgentLoop, row: dict[str, Any]) -> list[Any]:
    return asyncio.run(loop.run(dict(SAMPLING), **row))


def test_a_multi_call_rollout_becomes_one_output_per_segment_with_the_exact_recorded_tokens(tmp_path: Path):
    server = FakeServerManager(ANSWERS)
    loop = make_loop(tmp_path, server, Scenario(agent=three_calls_two_conversations(), verifier=reward(1.0)))
    outputs = run_loop(loop, dataset_row(tmp_path))

    assert len(outputs) == 2 and len(server.requests) == 3
    rollout_id = outputs[0].extra_fields["forge_rollout_id"]
    assert {request_id for request_id, _, _ in server.requests} == {rollout_id}  # sticky routing
    assert all(params["max_tokens"] >= 1 and params["temperature"] == 1.0 and params["logprobs"] is True
               for _, _, params in server.requests)
    (_, prompt0, _), (_, prompt1, _), (_, prompt2, _) = server.requests
    tool_result = prompt1[len(prompt0) + len(ANSWERS[0]):]  # what the proxy put between the two answers
    assert prompt1[:len(prompt0) + len(ANSWERS[0])] == prompt0 + ANSWERS[0] and tool_result

    first, second = outputs
    assert first.prompt_ids == prompt0
    assert first.response_ids == ANSWERS[0] + tool_result + ANSWERS[1]
    assert first.response_mask == [1] * len(ANSWERS[0]) + [0] * len(tool_result) + [1] * len(ANSWERS[1])
    assert first.response_logprobs == [logprob(k) for k in range(len(ANSWERS[0]))] + [0.0] * len(tool_result) + \
        [logprob(k) for k in range(len(ANSWERS[1]))]
    assert second.prompt_ids == prompt2 and second.response_ids == ANSWERS[2]
    assert second.response_mask == [1] * len(ANSWERS[2])
    assert (first.reward_score, second.reward_score) == (None, 1.0)  # on the last; veRL copies it back
    assert first.extra_fields.keys() == second.extra_fields.keys()  # veRL stacks them across rows
    assert second.extra_fields["reward_extra_info"] == {"success": 1.0, "agent_timeout": 0.0}
    assert (second.extra_fields["min_global_steps"], second.extra_fields["max_global_steps"]) == (2, 3)
    assert second.extra_fields["forge_status"] == "success" and second.extra_fields["forge_dropped_segments"] == 0

    # ... and exactly what the proxy recorded in the rollout's run directory
    [saved] = list((tmp_path / "runs").rglob(f"trajectories/{rollout_id}.json"))
    recorded = json.loads(saved.read_text())
    assert [(s["prompt_ids"], s["response_ids"], s["response_mask"], s["logprobs"]) for s in recorded["segments"]] \
        == [(o.prompt_ids, o.response_ids, o.response_mask, o.response_logprobs) for o in outputs]
    assert recorded["reward"] == 1.0 and recorded["status"] == "success"


WORKER_HEAP = """
import gc, json
import openforgerl.train.verl.agent_loop  # what an agent-loop worker holds: torch, veRL, Ray
from openforgerl.rollout.proxy.server import settle_heap_once
young_before = gc.get_threshold()[0]
first, again = settle_heap_once(), settle_heap_once()
print(json.dumps({"first": first, "again": again, "frozen": gc.get_freeze_count(), "young_before": young_before,
                  "young": gc.get_threshold()[0]}))
"""


def test_a_worker_s_heap_is_settled_once_at_its_first_rollout_and_exits_without_leak_reports(tmp_path: Path,
                                                                                             monkeypatch):
    # the process side, in a process of its own (it freezes the heap of whoever calls it)
    done = subprocess.run([sys.executable, "-c", WORKER_HEAP], capture_output=True, text=True, timeout=300, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert (seen["first"], seen["again"]) == (True, False), seen
    assert seen["frozen"] > 100_000 and seen["young_before"] < seen["young"], seen
    assert "leak" not in done.stderr, done.stderr[-2000:]  # frozen objects are let go at exit (nanobind counts)

    # the loop's side: each run asks (the first one in the process settles), unless the settings say no
    asked: list[bool] = []
    monkeypatch.setattr("openforgerl.train.verl.agent_loop.settle_heap_once", lambda: asked.append(True) or True)
    scenario = Scenario(agent=three_calls_two_conversations(), verifier=reward(1.0))
    run_loop(make_loop(tmp_path / "a", FakeServerManager(ANSWERS), scenario, settle_heap=True),
             dataset_row(tmp_path / "a"))
    run_loop(make_loop(tmp_path / "b", FakeServerManager(ANSWERS), scenario), dataset_row(tmp_path / "b"))
    assert asked == [True]


def test_grpo_advantage_is_broadcast_to_every_segment_of_a_session_and_lone_members_get_no_gradient(tmp_path: Path):
    sessions = []
    for session, value in enumerate((1.0, 0.0)):
        loop = make_loop(tmp_path / f"s{session}", FakeServerManager(ANSWERS),
                         Scenario(agent=three_calls_two_conversations(), verifier=reward(value)))
        sessions.append(run_loop(loop, dataset_row(tmp_path / f"s{session}", "u1", session)))
    rows = [(f"u1_{s}_{i}", output) for s, outputs in enumerate(sessions) for i, output in enumerate(outputs)]
    keys = [key for key, _ in rows]
    width = max(len(output.response_ids) for _, output in rows)
    mask = torch.tensor([o.response_mask + [0] * (width - len(o.response_mask)) for _, o in rows], dtype=torch.float32)
    scores = torch.zeros_like(mask)
    for row, (_, output) in enumerate(rows):
        scores[row, len(output.response_ids) - 1] = sessions[int(keys[row].split("_")[1])][-1].reward_score

    advantages = multi_trajectory_grpo(keys, scores, mask)
    expected = torch.tensor([0.7071, 0.7071, -0.7071, -0.7071]).unsqueeze(-1) * mask
    assert torch.allclose(advantages, expected, atol=1e-3)

    # a third group whose other members all left (infra errors): one session, two rows -> masked out
    uids, members = [k.split("_")[0] for k in keys] + ["u2", "u2"], [k.split("_")[1] for k in keys] + ["0", "0"]
    zeroed = zero_singleton_groups(torch.cat([mask, mask[:2]]), uids, members)
    assert torch.equal(zeroed[:4], mask) and zeroed[4:].sum() == 0


def multi_trajectory_grpo(keys: list[str], scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """veRL's multi-trajectory GRPO (``v1.utils``) when it imports; its own building blocks otherwise:
    group statistics over each session's final row, the scalar broadcast to the session's rows."""
    try:
        from verl.protocol import DataProto
        from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
    except ImportError:  # v1 needs transferqueue, torchdata and peft, which the CPU environment lacks
        finals = {key.rsplit("_", 1)[0]: row for row, key in enumerate(keys)}  # last index wins
        picked = list(finals.values())
        advantages, _ = core_algos.compute_grpo_outcome_advantage(
            scores[picked], mask[picked], index=[keys[row].split("_")[0] for row in picked])
        scalar = advantages[torch.arange(len(picked)), mask[picked].argmax(dim=1)]
        session = [list(finals).index(key.rsplit("_", 1)[0]) for key in keys]
        return scalar[session].unsqueeze(-1) * mask
    data = DataProto.from_dict(tensors={"token_level_rewards": scores, "response_mask": mask},
                               non_tensors={"uid": [k.split("_")[0] for k in keys]})
    return compute_advantage_for_multi_trajectories(data, keys, core_algos.AdvantageEstimator.GRPO).batch["advantages"]


@pytest.mark.parametrize("scenario, status", [
    (Scenario(start_error=SandboxError("the container engine went away")), "infra_error"),
    (Scenario(agent=exits(0), verifier=exits(2, stderr="test.sh crashed")), "verifier_error"),
])
def test_a_rollout_that_is_not_the_policy_s_doing_leaves_its_group(tmp_path: Path, scenario: Scenario, status: str):
    server = FakeServerManager(ANSWERS)
    loop = make_loop(tmp_path, server, scenario)
    assert run_loop(loop, dataset_row(tmp_path)) == []
    [log] = list((tmp_path / "runs").rglob("rollouts.jsonl"))
    [line] = [json.loads(text) for text in log.read_text().splitlines()]
    assert line["status"] == status


def test_a_tool_parser_that_cannot_read_the_policy_s_calls_is_refused_naming_the_agent_loop_s_key(tmp_path: Path):
    # The policy's template (CharTemplate) writes Hermes calls; the YAML entry asks for Llama 3's JSON.
    scenario = Scenario(agent=three_calls_two_conversations(), verifier=reward(1.0))
    loop = make_loop(tmp_path, FakeServerManager(ANSWERS), scenario, tool_parser="llama3_json")
    with pytest.raises(UserError) as refused:
        run_loop(loop, dataset_row(tmp_path))
    message = str(refused.value)
    assert message.startswith("the forge_agent agent loop's tool_parser 'llama3_json': it does not read")
    assert message.endswith("fix: set the forge_agent agent loop's tool_parser to 'hermes' (or 'auto')")
    assert not (tmp_path / "runs").exists()  # refused before any sandbox or proxy started


def test_segments_too_long_for_verl_are_cut_or_dropped_and_say_so():
    segments = [{"prompt_ids": [1] * 9, "response_ids": [2, 3], "response_mask": [1, 1], "logprobs": [-0.5, -0.5]},
                {"prompt_ids": [1] * 4, "response_ids": [5, 6, 7, 8, 9, 10], "response_mask": [1, 1, 0, 0, 1, 1],
                 "logprobs": [-0.5, -0.25, 0, 0, -0.125, -0.125], "calls": [1, 2]}]
    result = RolloutResult("r1", "hello", 0, "react", "failure", 0.0)
    [output] = segment_outputs({"segments": segments, "calls": []}, result, prompt_length=8, response_length=4)
    assert output.response_ids == [5, 6, 7, 8] and output.response_mask == [1, 1, 0, 0]
    assert output.response_logprobs == [-0.5, -0.25, 0, 0] and output.reward_score == 0.0
    assert output.extra_fields["forge_truncated_tokens"] == 2 and output.extra_fields["forge_dropped_segments"] == 1


def test_the_engine_tells_a_length_cut_from_a_stop_which_verl_reports_alike():
    answers = [[104, 105, 257], [104, 105, 106]]
    engine = VerlEngine(FakeServerManager(answers), sampling_params=SAMPLING, stop_ids=TEMPLATE.stop_ids,
                        response_length=3, context_tokens=10, request_id="r1")
    stop = asyncio.run(engine.generate([1, 2], Sampling(max_tokens=50)))
    length = asyncio.run(engine.generate([1, 2], Sampling()))
    assert (stop.finish_reason, length.finish_reason) == ("stop", "length")
    assert [params["max_tokens"] for _, _, params in engine.client.requests] == [3, 3]  # response_length caps it


def test_the_shipped_agent_loop_yaml_builds_the_loop_the_way_verl_s_worker_does(tmp_path: Path):
    import hydra

    from openforgerl.train.verl.launch import AGENT_LOOPS

    [entry] = OmegaConf.load(AGENT_LOOPS)
    rollout = {"prompt_length": 64, "response_length": 32, "multi_turn": {"tool_config_path": None}}
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}, "data": {}})
    loop = hydra.utils.instantiate(config=entry, trainer_config=DictConfigWrap(config), server_manager=None,
                                   tokenizer=FakeTokenizer(), processor=None, hf_model_type=None,
                                   dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data), tools=None)
    assert isinstance(loop, ForgeAgentLoop) and entry.name == "forge_agent"
    assert loop.settings.rollout["runtime"] == {"type": "docker"} and loop.settings.max_sandboxes == 8
    task = write_task(tmp_path / "tasks", "hello")
    spec = {"task": "hello", "path": str(task), "harness": "react", "harness_options": {}, "image": None}
    row = {"uid": "abcdef123456", "session_id": 2, "global_steps": 7}
    config_for = loop.rollout_config_for(TaskSpec.from_extra_info({"forge": json.dumps(spec)}), row)
    assert (config_for.proxy.max_tokens, config_for.proxy.max_context_tokens) == (32, 96)
    assert config_for.run_dir == str(Path("runs/verl") / "step7" / "hello-abcdef12-2") and config_for.retry_infra == 0
