"""The orchestrator's status machine on the fake runtime: every status, every retry path, no Docker.

Each rollout of a run ends in exactly one recorded status (rollouts.jsonl, summary.json, the
returned results agree), and no sandbox is left behind whatever happened inside it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from orchestration import Agent, ModelAgent, run, statuses

from openforgerl.errors import ProviderError, SandboxError, UserError
from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.rollout.runtime import LABEL_ROLLOUT
from openforgerl.rollout.proxy_handle import ProxyHandle
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.proxy import InProcessProxy
from openforgerl.testing.runtime import (
    FakeRuntime,
    Scenario,
    dies,
    exits,
    hangs,
    oom_kills,
    raises,
    reward,
    scripted,
    takes,
    writes,
)
from openforgerl.testing.tasks import write_task


def test_a_reward_at_the_threshold_is_a_success_and_below_it_a_policy_failure(tmp_path: Path):
    _, ok = run(tmp_path / "a", FakeRuntime(Scenario(verifier=reward(1.0, checked="hello.txt"))))
    assert statuses(ok) == [("success", 1.0)] and ok[0].metrics == {"checked": "hello.txt"}
    _, partial = run(tmp_path / "b", FakeRuntime(Scenario(verifier=reward(0.5))), pass_threshold=0.5)
    assert statuses(partial) == [("success", 0.5)]
    _, bad = run(tmp_path / "c", FakeRuntime(Scenario(verifier=reward(0))))
    assert statuses(bad) == [("failure", 0.0)]


def test_the_run_directory_keeps_the_agent_and_verifier_output(tmp_path: Path):
    runtime = FakeRuntime(Scenario(agent=exits(0, stdout="wrote hello.txt"),
                                   verifier=writes("/logs/verifier/reward.txt", "1", then=exits(0, stdout="ok"))))
    run_dir, [result] = run(tmp_path, runtime)
    logs = run_dir / "logs" / result.rollout_id
    assert (logs / "agent.stdout").read_text() == "wrote hello.txt"
    assert (logs / "verifier.stdout").read_text() == "ok"
    assert (logs / "logs" / "verifier" / "reward.txt").read_text() == "1"  # the sandbox's /logs, copied out
    assert (run_dir / "config.yaml").is_file() and result.timings["total_s"] >= result.timings["harness_s"]


def test_a_crashing_harness_is_a_policy_failure_that_keeps_its_exit_code(tmp_path: Path):
    _, results = run(tmp_path, FakeRuntime(Scenario(agent=exits(139, stderr="Segmentation fault"), verifier=reward(0))))
    assert [(r.status, r.reward, r.harness_exit_code) for r in results] == [("failure", 0.0, 139)]


def test_an_agent_past_its_timeout_is_killed_and_recorded_as_agent_timeout(tmp_path: Path):
    runtime = FakeRuntime(Scenario(agent=hangs(), verifier=reward(0)))
    _, results = run(tmp_path, runtime, agent_timeout_sec=0.05)
    assert statuses(results) == [("agent_timeout", 0.0)] and "agent ran past" in results[0].reason
    assert runtime.sandboxes[0].ended == ["agent"]  # what it left running is ended before the verifier


@pytest.mark.parametrize("verifier, why", [
    (writes("/logs/verifier/reward.json", '{"reward": "high"}'), "finite number"),
    (writes("/logs/verifier/reward.json", "{oops"), "not JSON"),
    (exits(2, stderr="boom"), "boom"),
    (exits(200, stderr="boom"), "exit 200"),  # a code past the signals' range is the verifier's own
    (hangs(), "timed out"),
])
def test_a_verifier_that_cannot_decide_is_a_verifier_error(tmp_path: Path, verifier, why: str):
    _, results = run(tmp_path, FakeRuntime(Scenario(verifier=verifier)), verifier_timeout_sec=0.05)
    assert statuses(results) == [("verifier_error", None)] and why in results[0].reason


@pytest.mark.parametrize(("verifier", "agent", "expected", "why"), [
    (exits(137, stderr="Killed"), exits(0), ("failure", 0.0), "signal 9"),  # OOM-killed, or killed by what it ran
    (exits(143), hangs(), ("agent_timeout", 0.0), "signal 15"),
    (exits(-9), exits(0), ("failure", 0.0), "signal 9"),
    (dies(detail="exit 143: its init was ended from inside", from_inside=True), exits(0), ("failure", 0.0),
     "ended its own sandbox"),
    (dies(detail="exit 137: its init was ended from inside", from_inside=True, exec_fails=True), exits(0),
     ("failure", 0.0), "ended its own sandbox"),
])
def test_a_verifier_ended_under_the_agent_s_work_scores_0_and_is_kept(tmp_path: Path, verifier, agent, expected,
                                                                       why: str):
    """The verifier runs what the agent wrote (as root): code that kills it, runs it out of memory or ends the
    sandbox's init must not turn a failure into a discarded verifier_error or infra_error."""
    _, results = run(tmp_path, FakeRuntime(Scenario(agent=agent, verifier=verifier)), retry_infra=2,
                     agent_timeout_sec=0.05)
    assert statuses(results) == [expected] and why in results[0].reason, results[0].reason
    assert results[0].try_index == 0


def control_apart(main: Scenario, control: Scenario):
    """The rollout's own sandbox plays ``main``; the verifier's control run on the untouched image, ``control``."""
    return lambda spec, n: control if spec.labels.get(LABEL_ROLLOUT, "").endswith("-control") else main


@pytest.mark.parametrize(("agent", "expected"), [(exits(0), "failure"), (hangs(), "agent_timeout")])
def test_a_verifier_that_hangs_only_on_the_agent_s_work_scores_0_and_is_kept(tmp_path: Path, agent, expected):
    """A root agent that replaces the interpreter the tests run with ``sleep``, or leaves a solution that loops,
    makes the verifier run past its timeout: a discarded verifier_error would be a way out of any failure. The
    same verifier on a fresh sandbox of the image ends at once, so the hang is the agent's."""
    runtime = FakeRuntime(control_apart(Scenario(agent=agent, verifier=hangs()), Scenario(verifier=reward(0))))
    _, results = run(tmp_path, runtime, retry_infra=2, agent_timeout_sec=0.05, verifier_timeout_sec=0.5)
    assert statuses(results) == [(expected, 0.0)] and "on the agent's work" in results[0].reason, results[0].reason
    assert results[0].sandbox["verifier_timeout"]["seconds"] == 0.5 and results[0].try_index == 0
    control = [box for box in runtime.sandboxes if box.spec.labels[LABEL_ROLLOUT].endswith("-control")]
    assert len(control) == 1 and [argv[-2:] for argv, user, _ in control[0].execs if user != "0"] == []  # no agent
    assert runtime.left_running == []


@pytest.mark.parametrize("control", [hangs(), takes(0.4, reward(0))])
def test_a_verifier_that_is_slow_on_the_untouched_image_too_stays_a_verifier_error(tmp_path: Path, control):
    """Hanging on the fresh image as well (or using more than half its timeout there) is the verifier's own
    problem or the machine's, not the policy's: discarded as before."""
    runtime = FakeRuntime(control_apart(Scenario(verifier=hangs()), Scenario(verifier=control)))
    _, results = run(tmp_path, runtime, verifier_timeout_sec=0.5)
    assert statuses(results) == [("verifier_error", None)], results[0].reason
    assert "untouched image too" in results[0].reason and runtime.left_running == []


def test_a_verifier_timeout_with_no_control_run_stays_a_verifier_error(tmp_path: Path):
    runtime = FakeRuntime(control_apart(Scenario(verifier=hangs()), Scenario(start_error=SandboxError("no room"))))
    _, results = run(tmp_path, runtime, verifier_timeout_sec=0.05)
    assert statuses(results) == [("verifier_error", None)] and "no control run: no room" in results[0].reason


def test_a_reward_file_the_agent_planted_is_gone_before_the_verifier_runs(tmp_path: Path):
    planted = writes("/logs/verifier/reward.json", '{"reward": 1}')
    runtime = FakeRuntime(Scenario(agent=planted, verifier=exits(0)))  # the verifier itself writes nothing
    _, results = run(tmp_path, runtime)
    assert statuses(results) == [("verifier_error", None)]
    assert "neither reward.json nor reward.txt" in results[0].reason


@pytest.mark.parametrize("scenario, why", [
    (Scenario(agent=dies()), "container exited"),
    (Scenario(agent=oom_kills(), verifier=reward(1)), "harness OOM-killed"),
    (Scenario(agent=dies(oom=True)), "OOM"),
    (Scenario(verifier=dies(detail="container was removed")), "sandbox died during verification"),
    (Scenario(verifier=dies(detail="Evicted: memory", exec_fails=True)), "died during verification: Evicted"),
    (Scenario(start_error=SandboxError("image openforgerl/task:x not found")), "not found"),
    (Scenario(image_error=SandboxError("harness 'codex' is not installed")), "not installed"),
    (Scenario(agent=raises(SandboxError("cannot exec in container"))), "cannot exec"),
    (Scenario(agent=raises(KeyError("bug"))), "internal error: KeyError"),
])
def test_what_is_not_the_policy_s_doing_is_an_infra_error(tmp_path: Path, scenario: Scenario, why: str):
    _, results = run(tmp_path, FakeRuntime(scenario))
    assert statuses(results) == [("infra_error", None)] and why in results[0].reason


@pytest.mark.parametrize(("step", "expected", "why"), [
    (dies(detail="Evicted: the node was low on memory", exec_fails=True), ("infra_error", None), "Evicted"),
    (dies(detail="DeadlineExceeded", deadline=True, exec_fails=True), ("agent_timeout", 0.0), "deadline"),
    (dies(detail="Evicted: ephemeral storage", storage_exceeded=True, exec_fails=True), ("failure", 0.0),
     "storage_mb"),
    (dies(detail="exit 143: its init was ended from inside", from_inside=True), ("failure", 0.0),
     "ended its own sandbox"),
    (dies(detail="exit 137: its init was ended from inside", from_inside=True, exec_fails=True), ("failure", 0.0),
     "ended its own sandbox"),
])
def test_an_exec_into_a_sandbox_that_just_ended_is_classified_by_why_it_ended(tmp_path: Path, step, expected,
                                                                               why: str):
    _, results = run(tmp_path, FakeRuntime(Scenario(agent=step)))
    assert statuses(results) == [expected] and why in results[0].reason, results[0].reason


@pytest.mark.parametrize(("verdict", "expected"), [(1, ("success", 1.0)), (0, ("failure", 0.0))])
def test_a_command_of_the_agent_s_that_runs_out_of_memory_is_the_policy_s_doing(tmp_path: Path, verdict, expected):
    """The kernel OOM-kills what the agent ran, the harness goes on: the rollout is verified and kept, never an
    infra error to be discarded (else running out of memory on purpose would be a way out of every failure)."""
    _, results = run(tmp_path, FakeRuntime(Scenario(agent=oom_kills(then=exits(0)), verifier=reward(verdict))),
                     retry_infra=2)
    assert statuses(results) == [expected] and results[0].try_index == 0
    assert results[0].sandbox["oom_killed"]


def test_infra_errors_are_retried_as_new_rollouts_and_only_the_final_try_counts(tmp_path: Path):
    flaky = [Scenario(start_error=SandboxError("engine hiccup")), Scenario(agent=dies()), Scenario()]
    runtime = FakeRuntime(scripted({"hello": flaky}))
    run_dir, results = run(tmp_path, runtime, retry_infra=2)
    assert [(r.status, r.try_index) for r in results] == [("infra_error", 0), ("infra_error", 1), ("success", 2)]
    assert len({r.rollout_id for r in results}) == 3
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["retries"] == 2 and summary["statuses"]["success"] == 1 and summary["statuses"]["infra_error"] == 0


def test_retries_stop_at_retry_infra(tmp_path: Path):
    runtime = FakeRuntime(Scenario(start_error=SandboxError("no engine")))
    run_dir, results = run(tmp_path, runtime, retry_infra=1)
    assert [(r.status, r.try_index) for r in results] == [("infra_error", 0), ("infra_error", 1)]
    assert json.loads((run_dir / "summary.json").read_text())["statuses"]["infra_error"] == 1


def test_policy_failures_are_never_retried(tmp_path: Path):
    _, results = run(tmp_path, FakeRuntime(Scenario(agent=hangs(), verifier=reward(0))), retry_infra=3,
                     agent_timeout_sec=0.05)
    assert [r.status for r in results] == ["agent_timeout"]


def test_many_rollouts_at_once_each_end_in_one_status(tmp_path: Path):
    plans = {"ok": Scenario(), "bad": Scenario(verifier=reward(0)), "hang": Scenario(agent=hangs()),
             "dead": Scenario(agent=dies())}
    runtime = FakeRuntime(scripted(plans))
    run_dir, results = run(tmp_path, runtime, tasks=list(plans), attempts=3, concurrency=4, agent_timeout_sec=0.05)
    by_task = {task: {r.status for r in results if r.task == task} for task in plans}
    assert by_task == {"ok": {"success"}, "bad": {"failure"}, "hang": {"agent_timeout"}, "dead": {"infra_error"}}
    assert len(results) == 12 and len(runtime.sandboxes) == 12
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tasks"]["ok"] == {"attempts": 3, "successes": 3, "statuses": {"success": 3}}


def test_an_unreachable_proxy_is_an_infra_error_for_each_rollout(tmp_path: Path):
    proxy = ProxyHandle("http://127.0.0.1:9", "admin-token-unused")  # nothing listens on the discard port
    _, results = run(tmp_path, FakeRuntime(), harness=ModelAgent(), proxy=proxy, attempts=2)
    assert [r.status for r in results] == ["infra_error", "infra_error"]
    assert all(r.reason.startswith("proxy:") for r in results)


def test_a_runtime_that_cannot_serve_the_run_fails_it_before_any_sandbox(tmp_path: Path):
    runtime = FakeRuntime(check_error=UserError("image x is not present locally", fix="forge build-env"))
    task = write_task(tmp_path, "hello")
    config = RolloutConfig(tasks=[str(task)], harness="nop", run_dir=str(tmp_path / "run"))
    with pytest.raises(UserError, match="not present locally"):
        asyncio.run(run_rollouts(config, harness=Agent(), runtime=runtime))
    assert runtime.starts == 0 and not (tmp_path / "run").exists()


def test_a_run_without_tasks_says_so_before_anything_starts(tmp_path: Path):
    (tmp_path / "manifest.jsonl").write_text("")  # build-env published nothing
    config = RolloutConfig(tasks=[str(tmp_path / "manifest.jsonl")], harness="nop", run_dir=str(tmp_path / "run"))
    with pytest.raises(UserError, match="no task directories"):
        asyncio.run(run_rollouts(config, harness=Agent(), runtime=FakeRuntime()))


def test_an_engine_that_does_not_answer_fails_the_run_before_any_sandbox(tmp_path: Path):
    task = write_task(tmp_path, "hello")
    config = RolloutConfig(tasks=[str(task)], run_dir=str(tmp_path / "run"),
                           proxy={"engine": {"type": "vllm", "base_url": "http://127.0.0.1:9"}})
    runtime = FakeRuntime()
    with pytest.raises(ProviderError, match="vLLM engine at http://127.0.0.1:9 does not answer") as raised:
        asyncio.run(run_rollouts(config, harness=ModelAgent(), runtime=runtime))
    assert "forge serve" in (raised.value.fix or "") and runtime.starts == 0


def test_a_mistyped_harness_option_fails_when_the_config_is_read():
    from openforgerl.config import resolve
    from openforgerl.errors import ConfigError

    with pytest.raises(ConfigError, match="harness_options.max_turn: not an option of harness react") as raised:
        resolve(RolloutConfig, None, ["harness=react", "harness_options.max_turn=4"])
    assert "max_turns" in (raised.value.fix or "")


def test_runtime_settings_are_validated_by_the_runtime_they_name():
    from openforgerl.config import resolve
    from openforgerl.errors import ConfigError, UnknownNameError
    from openforgerl.rollout.runtimes.local import LocalRuntimeConfig

    config = resolve(RolloutConfig, None, ["runtime.type=local", "runtime.base_dir=/tmp/x"])
    assert isinstance(config.runtime, LocalRuntimeConfig) and config.runtime.base_dir == "/tmp/x"
    assert config.model_dump()["runtime"] == {"type": "local", "base_dir": "/tmp/x"}  # saved whole in config.yaml
    with pytest.raises(ConfigError, match="runtime.start_timeout: Extra inputs"):
        resolve(RolloutConfig, None, ["runtime.start_timeout=5"])
    with pytest.raises(UnknownNameError, match="unknown runtime 'podman'"):
        resolve(RolloutConfig, None, ["runtime.type=podman"])
    with pytest.raises(ConfigError, match="runtime.namespce: Extra inputs"):  # a built-in's own settings, too
        resolve(RolloutConfig, None, ["runtime.type=kubernetes", "runtime.namespce=forge"])


def test_a_runtime_from_an_entry_point_can_be_selected_and_configured(monkeypatch: pytest.MonkeyPatch):
    from importlib.metadata import EntryPoint

    from openforgerl import plugins
    from openforgerl.config import resolve
    from openforgerl.rollout.runtimes import make_runtime
    from openforgerl.testing.runtime import FakeRuntimeConfig

    fake = EntryPoint("fake", "openforgerl.testing.runtime:FakeRuntime", "openforgerl.runtimes")
    real = plugins.entry_points
    monkeypatch.setattr(plugins, "entry_points",
                        lambda group: [fake] if group == "openforgerl.runtimes" else real(group=group))
    config = resolve(RolloutConfig, None, ["runtime.type=fake"])
    assert isinstance(config.runtime, FakeRuntimeConfig)
    runtime = make_runtime(config.runtime)
    assert isinstance(runtime, FakeRuntime) and runtime.config is config.runtime


def calls_model(proxy: InProcessProxy, calls: int = 1):
    async def step(box, command, timeout):
        token = box.execs[-1][2]["OPENAI_API_KEY"]
        async with proxy.client() as client:
            for _ in range(calls):
                await client.post("/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                                  json={"model": "smollm2", "messages": [{"role": "user", "content": "hi"}]})
        return await exits(0)(box, command, timeout)
    return step


def test_model_calls_through_the_proxy_are_saved_as_the_rollout_s_trajectory(tmp_path: Path):
    proxy = InProcessProxy([ScriptTurn(text="done")])
    runtime = FakeRuntime(Scenario(agent=calls_model(proxy, calls=2)))
    run_dir, [result] = run(tmp_path, runtime, harness=ModelAgent(), proxy=proxy.handle())
    assert result.status == "success" and result.model_usage["calls"] == 2
    trajectory = json.loads((run_dir / result.trajectory).read_text())
    assert trajectory["status"] == "success" and trajectory["reward"] == 1.0 and len(trajectory["segments"]) == 2


def test_a_task_that_asks_for_the_transcript_gets_it_from_the_proxy_s_record_not_from_the_agent(tmp_path: Path):
    proxy = InProcessProxy([ScriptTurn(tool_calls=[{"name": "exec", "arguments": {"command": "ls"}}]),
                            ScriptTurn(text="done")])
    tools = [{"type": "function", "function": {"name": "exec", "parameters": {"type": "object"}}}]

    async def agent(box, command, timeout):
        box.write("/logs/verifier/transcript.jsonl", '{"forged": true}\n')  # planted: must be replaced
        auth = {"authorization": f"Bearer {box.execs[-1][2]['OPENAI_API_KEY']}"}
        messages = [{"role": "user", "content": "list"}]
        async with proxy.client() as client:
            first = (await client.post("/v1/chat/completions", headers=auth,
                                       json={"model": "smollm2", "messages": messages, "tools": tools})).json()
            call = first["choices"][0]["message"]["tool_calls"][0]
            messages += [first["choices"][0]["message"], {"role": "tool", "tool_call_id": call["id"], "content": "a b"}]
            await client.post("/v1/chat/completions", headers=auth,
                              json={"model": "smollm2", "messages": messages, "tools": tools})
        return await exits(0)(box, command, timeout)

    seen = []

    async def verifier(box, command, timeout):
        seen.extend(json.loads(line) for line in box.read("/logs/verifier/transcript.jsonl").splitlines())
        return await reward(1.0)(box, command, timeout)

    runtime = FakeRuntime(Scenario(agent=agent, verifier=verifier))
    _, [result] = run(tmp_path, runtime, harness=ModelAgent(), proxy=proxy.handle(),
                      task={"instruction": "List the files.", "tables": {"verifier": {"transcript": True}}})
    assert result.status == "success"
    # OpenClaw's session file, as PinchBench / QwenClawBench graders read it: a header, then message events.
    assert seen[0] == {"type": "session", "version": 3, "cwd": "/app"} and "forged" not in json.dumps(seen)
    assert [event["type"] for event in seen[1:]] == ["message"] * 4
    assert [event["parentId"] for event in seen[1:]] == [None] + [event["id"] for event in seen[1:-1]]
    messages = [event["message"] for event in seen[1:]]
    assert [m["role"] for m in messages] == ["user", "assistant", "toolResult", "assistant"]
    assert messages[0]["content"] == [{"type": "text", "text": "List the files."}]
    assert messages[1]["content"] == [{"type": "toolCall", "id": "call_1", "name": "exec",
                                       "arguments": {"command": "ls"}}]
    assert messages[1]["stopReason"] == "toolUse" and messages[1]["usage"]["output"] > 0
    assert {k: messages[2][k] for k in ("toolCallId", "toolName", "isError")} == \
        {"toolCallId": "call_1", "toolName": "exec", "isError": False}
    assert messages[2]["content"] == [{"type": "text", "text": "a b"}]
    assert messages[3]["content"] == [{"type": "text", "text": "done"}] and messages[3]["stopReason"] == "stop"


def test_engine_errors_during_a_rollout_make_it_an_infra_error_not_a_policy_failure(tmp_path: Path):
    def engine_down(prompt_ids):
        raise ProviderError("vLLM did not answer")

    proxy = InProcessProxy(respond=engine_down)
    runtime = FakeRuntime(Scenario(agent=calls_model(proxy), verifier=reward(0)))
    _, [result] = run(tmp_path, runtime, harness=ModelAgent(), proxy=proxy.handle())
    assert result.status == "infra_error" and result.reason == "engine failed on 1 call(s)"


def test_an_interrupted_run_records_every_rollout_in_flight_as_cancelled(tmp_path: Path):
    runtime = FakeRuntime(Scenario(agent=hangs()))
    tasks = [write_task(tmp_path / "tasks", f"t{n}") for n in range(3)]
    config = RolloutConfig(tasks=[str(t) for t in tasks], harness="nop", concurrency=2, attempts=2,
                           run_dir=str(tmp_path / "run"))

    async def interrupt() -> None:
        running = asyncio.ensure_future(run_rollouts(config, harness=Agent(), runtime=runtime))
        while len(runtime.sandboxes) < 2:
            await asyncio.sleep(0.01)
        running.cancel()  # what the first Ctrl-C does
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(interrupt())
    lines = [json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    assert [line["status"] for line in lines] == ["cancelled", "cancelled"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["statuses"]["cancelled"] == 2 and summary["not_started"] == 4
    assert runtime.left_running == []


def test_the_admin_token_of_a_running_proxy_never_lands_in_the_run_directory(tmp_path: Path, monkeypatch):
    from openforgerl.config import resolve, save_resolved

    monkeypatch.setenv("FORGE_PROXY_ADMIN_TOKEN", "from-the-environment")
    config = resolve(RolloutConfig, None, ["proxy.url=http://127.0.0.1:9"])
    assert config.proxy.admin_token.get_secret_value() == "from-the-environment"
    given = resolve(RolloutConfig, None, ["proxy.admin_token=SECRET-ADMIN-TOKEN-123"])
    saved = save_resolved(given, tmp_path).read_text()
    assert "SECRET-ADMIN-TOKEN-123" not in saved and "admin_token: '**********'" in saved


@pytest.mark.parametrize("where", ["under-a-file/run", "readonly/run"])
def test_a_run_directory_that_cannot_be_written_is_one_line_before_any_sandbox(tmp_path: Path, where: str,
                                                                               monkeypatch: pytest.MonkeyPatch):
    import errno

    from openforgerl.errors import ForgeError

    (tmp_path / "under-a-file").write_text("not a directory")
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *args, **kwargs) -> None:  # root writes through chmod: say what a read-only mount says
        if "readonly" in str(self):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    task = write_task(tmp_path / "tasks", "hello")
    config = RolloutConfig(tasks=[str(task)], harness="nop", run_dir=str(tmp_path / where))
    runtime = FakeRuntime(Scenario())
    with pytest.raises(ForgeError) as raised:
        asyncio.run(run_rollouts(config, harness=Agent(), runtime=runtime))
    assert "\n" not in str(raised.value) and raised.value.fix and where.split("/")[0] in str(raised.value)
    assert runtime.starts == 0


def test_a_rollout_the_proxy_cut_short_is_recorded_as_truncated(tmp_path: Path):
    proxy = InProcessProxy([ScriptTurn(text="and then " * 100)], rollout_max_tokens=20)
    runtime = FakeRuntime(Scenario(agent=calls_model(proxy, calls=2)))
    run_dir, [result] = run(tmp_path, runtime, harness=ModelAgent(), proxy=proxy.handle())
    line = json.loads((run_dir / "rollouts.jsonl").read_text().splitlines()[-1])
    assert result.truncated and "token budget" in result.truncated and line["truncated"] == result.truncated
    assert result.model_usage["calls"] == 1  # the second call never reached the engine
