"""The judge relay: only a running verifier's token reaches the judge, and only the pinned model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from orchestration import run

from openforgerl.errors import UserError
from openforgerl.rollout.judge_relay import KEY_ENV, URL_ENV, JudgeRelay, JudgeSettings
from openforgerl.testing.closing_server import ClosingServer
from openforgerl.testing.openai_stub import ScriptedChatServer
from openforgerl.testing.runtime import FakeRuntime, Scenario, exits, reward

BODY = {"model": "judge-7b", "messages": [{"role": "user", "content": "grade this"}]}


def ask(relay: JudgeRelay, token: str | None, body: dict | None = None, path: str = "/v1/chat/completions"):
    async def go():
        transport = httpx.ASGITransport(app=relay)
        async with httpx.AsyncClient(transport=transport, base_url="http://relay") as client:
            headers = {"authorization": f"Bearer {token}"} if token else {}
            return await client.post(path, json=body or BODY, headers=headers)
    return asyncio.run(go())


def test_an_issued_token_reaches_the_judge_until_it_is_revoked():
    with ScriptedChatServer(["VERDICT: PASS"]) as judge:
        relay = JudgeRelay(JudgeSettings(base_url=judge.base_url, model="judge-7b"))
        token = relay.issue()
        answer = ask(relay, token)
        assert answer.status_code == 200 and "VERDICT: PASS" in answer.text
        relay.revoke(token)
        assert ask(relay, token).status_code == 401
        assert ask(relay, None).status_code == 401 and ask(relay, "guessed").status_code == 401
        assert len(judge.requests) == 1 and judge.requests[0]["messages"] == BODY["messages"]


def test_only_the_pinned_model_and_the_one_route_are_served():
    with ScriptedChatServer(["VERDICT: PASS"]) as judge:
        relay = JudgeRelay(JudgeSettings(base_url=judge.base_url, model="judge-7b"))
        token = relay.issue()
        assert ask(relay, token, {**BODY, "model": "cheaper"}).status_code == 403
        assert ask(relay, token, path="/v1/models").status_code == 404
        assert ask(relay, token, path="/rollouts").status_code == 404
        assert judge.requests == []


def test_an_unreachable_judge_is_a_502_the_verifier_records_as_an_invalid_vote():
    relay = JudgeRelay(JudgeSettings(base_url="http://127.0.0.1:9/v1"))
    assert ask(relay, relay.issue()).status_code == 502


def asks_the_judge(seen: dict):
    """A verifier that asks the judge through the relay, with what its ``env -i`` command line gave it."""
    async def verifier(box, command, timeout):
        env = dict(part.split("=", 1) for part in command if "=" in part and part.split("=", 1)[0].isupper())
        async with httpx.AsyncClient() as client:
            answer = await client.post(env[URL_ENV] + "/chat/completions", json=BODY,
                                       headers={"authorization": f"Bearer {env[KEY_ENV]}"})
        seen["token"], seen["url"] = env[KEY_ENV], env[URL_ENV]
        return await reward(1.0 if "PASS" in answer.text else 0.0)(box, command, timeout)
    return verifier


def test_a_task_that_declares_a_judge_gets_it_in_its_verifier_only(tmp_path: Path):
    seen: dict = {}

    async def agent(box, command, timeout):
        seen["agent"] = json.dumps(box.execs[-1])  # its command line and environment
        return await exits(0)(box, command, timeout)

    with ScriptedChatServer(["VERDICT: PASS"]) as judge:
        runtime = FakeRuntime(Scenario(agent=agent, verifier=asks_the_judge(seen)))
        _, [result] = run(tmp_path, runtime, task={"tables": {"verifier": {"judge": True}}},
                          judge=JudgeSettings(base_url=judge.base_url, model="judge-7b"))
        assert result.status == "success" and len(judge.requests) == 1
    assert URL_ENV not in seen["agent"] and KEY_ENV not in seen["agent"] and seen["token"] not in seen["agent"]


def test_a_task_that_does_not_declare_a_judge_gets_no_token(tmp_path: Path):
    async def verifier(box, command, timeout):
        assert not any(part.startswith((URL_ENV, KEY_ENV)) for part in command)
        return await reward(1.0)(box, command, timeout)

    runtime = FakeRuntime(Scenario(agent=exits(0), verifier=verifier))
    _, [result] = run(tmp_path, runtime, judge=JudgeSettings(base_url="http://127.0.0.1:9/v1"))
    assert result.status == "success"


def test_a_run_whose_tasks_want_a_judge_and_has_none_is_refused_before_any_sandbox(tmp_path: Path):
    runtime = FakeRuntime(Scenario(agent=exits(0), verifier=reward(1.0)))
    with pytest.raises(UserError, match=r"ask for the run's LLM judge.*judge.base_url"):
        run(tmp_path, runtime, task={"tables": {"verifier": {"judge": True}}})
    assert runtime.sandboxes == []


JUDGE_ANSWER = b'{"choices": [{"message": {"role": "assistant", "content": "VERDICT: PASS"}}]}'


def test_a_judge_request_sent_as_the_endpoint_closes_its_connection_is_sent_again():
    async def scenario(judge: ClosingServer) -> list[httpx.Response]:
        server, url = await judge.start()
        relay = JudgeRelay(JudgeSettings(base_url=url + "/v1"))
        token = relay.issue()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=relay), base_url="http://relay") as client:
                return [await client.post("/v1/chat/completions", json=BODY,
                                          headers={"authorization": f"Bearer {token}"}) for _ in range(3)]
        finally:
            await relay.aclose()
            server.close()

    closing = ClosingServer(JUDGE_ANSWER)  # closes a kept-alive connection at its next request
    answers = asyncio.run(scenario(closing))
    assert [a.status_code for a in answers] == [200] * 3 and all("VERDICT: PASS" in a.text for a in answers)
    assert (closing.answered, closing.dropped) == (3, 2)  # requests 2 and 3: dropped on the kept connection, resent
    dead = ClosingServer(JUDGE_ANSWER, drop_all=True)
    answers = asyncio.run(scenario(dead))
    assert [a.status_code for a in answers] == [502] * 3
    assert "RemoteProtocolError" in answers[0].json()["error"]["message"]
    assert (dead.answered, dead.dropped) == (0, 6)  # sent twice each, not retried without end
