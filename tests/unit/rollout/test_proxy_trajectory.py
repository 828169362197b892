"""Token-exact trajectories: prefix reuse, clean/realigned/fork, masks and logprobs, recovery."""

from __future__ import annotations

import asyncio
import json

import pyarrow.parquet as pq
import pytest

from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.rollout.trajectory import CallRecord, Trajectory, pack_ids, unpack_ids
from openforgerl.testing.proxy import PATHS, InProcessProxy
from openforgerl.train.export import export_jsonl, export_parquet

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}]
SYSTEM = {"role": "system", "content": "You are an agent."}
USER = {"role": "user", "content": "create hello.txt containing hi"}


def run(coro):
    return asyncio.run(coro)


async def chat(proxy, client, token, messages, **extra):
    resp = await client.post(PATHS["chat"], json={"messages": messages, "tools": TOOLS, **extra},
                             headers={"authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]["message"]


def tool_results(message, output="ok"):
    return [{"role": "tool", "tool_call_id": c["id"], "content": output} for c in message.get("tool_calls") or []]


async def conversation(proxy, n_tool_turns: int, edit=None):
    """A harness loop: call, run the tools, resend everything; returns the trajectory."""
    async with proxy.client() as client:
        rollout_id, token = await proxy.new_rollout(client)
        messages = [SYSTEM, USER]
        for i in range(n_tool_turns + 1):
            reply = await chat(proxy, client, token, messages)
            messages = messages + [reply] + tool_results(reply, f"result {i}")
            if edit:
                messages = edit(i, messages)
        return await proxy.trajectory(client, rollout_id)


def write_call(path: str) -> ScriptTurn:
    return ScriptTurn(tool_calls=[{"name": "write_file", "arguments": {"path": path}}])


def test_a_multi_turn_rollout_is_one_segment_with_model_tokens_masked_in():
    proxy = InProcessProxy([write_call("a"), write_call("b"), ScriptTurn(text="done")])
    trajectory = run(conversation(proxy, 2))
    assert trajectory["counts"]["clean"] == 3 and len(trajectory["segments"]) == 1
    segment = trajectory["segments"][0]
    ids, mask = segment["response_ids"], segment["response_mask"]
    runs, start = [], 0  # (mask, decoded text) of each run of equal mask values
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], proxy.template.decode(ids[start:i], False)))
            start = i
    assert [m for m, _ in runs] == [1, 0, 1, 0, 1]
    assert "result 0" in runs[1][1] and "<tool_response>" in runs[1][1] and runs[1][1].endswith("assistant\n")
    assert runs[0][1].startswith("<tool_call>") and runs[-1][1] == "done<|im_end|>"
    # the engine saw exactly the segment's ids at each call
    full = segment["prompt_ids"] + ids
    for prompt in proxy.engine.prompts:
        assert full[:len(prompt)] == prompt


def test_a_turn_the_template_cannot_reproduce_is_realigned_and_keeps_the_sampled_ids():
    compact = '<tool_call>{"name":"write_file","arguments":{"path":"a"}}</tool_call>'  # no spaces/newlines
    proxy = InProcessProxy([ScriptTurn(text=compact), ScriptTurn(text="done")])
    trajectory = run(conversation(proxy, 1))
    assert trajectory["counts"]["realigned"] == 1 and trajectory["counts"]["fork"] == 0
    (segment,) = trajectory["segments"]
    sampled = proxy.engine.turn_ids(ScriptTurn(text=compact))
    start = len(proxy.engine.prompts[0]) - len(segment["prompt_ids"])
    assert segment["response_ids"][start:start + len(sampled)] == sampled
    assert proxy.engine.prompts[1][:len(proxy.engine.prompts[0]) + len(sampled)] == proxy.engine.prompts[0] + sampled
    # a re-tokenisation would have put the template's spelling of the call there instead
    assert '{"name": "write_file", "arguments": {"path": "a"}}' not in proxy.template.decode(proxy.engine.prompts[1])


def test_an_edited_history_starts_a_new_segment():
    def compact(i, messages):  # after the first turn the harness summarises the history
        return [SYSTEM, {"role": "user", "content": "summary: a was written; now write b"}] if i == 0 else messages

    proxy = InProcessProxy([write_call("a"), write_call("b"), ScriptTurn(text="done")])
    trajectory = run(conversation(proxy, 2, edit=compact))
    assert trajectory["counts"]["fork"] == 1 and trajectory["counts"]["clean"] == 2
    assert len(trajectory["segments"]) == 2
    assert [len(s["calls"]) for s in trajectory["segments"]] == [1, 2]


def test_concurrent_calls_on_one_history_branch_with_exact_shared_prefix():
    proxy = InProcessProxy([write_call("a"), ScriptTurn(text="x"), ScriptTurn(text="y")])
    proxy.engine.config.latency_s = 0.05

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            reply = await chat(proxy, client, token, [SYSTEM, USER])
            history = [SYSTEM, USER, reply] + tool_results(reply)
            await asyncio.gather(chat(proxy, client, token, history), chat(proxy, client, token, history))
            return await proxy.trajectory(client, rollout_id)

    trajectory = run(scenario())
    assert len(trajectory["segments"]) == 2 and trajectory["counts"]["fork"] == 1
    first, branch = trajectory["segments"]
    assert branch["prompt_ids"] == proxy.engine.prompts[2] == proxy.engine.prompts[1]
    assert (first["prompt_ids"] + first["response_ids"])[:len(branch["prompt_ids"])] == branch["prompt_ids"]


def test_required_tool_choice_forces_a_call_and_masks_the_forced_tokens():
    proxy = InProcessProxy([ScriptTurn(text='{"name": "write_file", "arguments": {"path": "a"}}\n</tool_call>')])

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            reply = await chat(proxy, client, token, [SYSTEM, USER], tool_choice="required")
            return reply, await proxy.trajectory(client, rollout_id)

    reply, trajectory = run(scenario())
    assert reply["tool_calls"][0]["function"]["name"] == "write_file"
    segment = trajectory["segments"][0]
    forced = proxy.template.encode("<tool_call>\n")
    assert segment["response_ids"][:len(forced)] == forced and segment["response_mask"][:len(forced)] == [0] * len(forced)
    assert set(segment["response_mask"][len(forced):]) == {1}


def test_an_edit_inside_an_earlier_message_forks_and_every_record_hashes_its_own_prompt():
    """The newest head keeps its prompt text, so the next call checks its history by comparing text and hashes
    only what it adds: an edit inside an earlier message (same messages, same roles, same replies) is caught,
    and the hash each record carries (what a restarted proxy checks by) is the one of its whole prompt."""
    from openforgerl.rollout.proxy.lineage import text_sha

    proxy = InProcessProxy([write_call("a"), write_call("b"), ScriptTurn(text="done")])
    sent = []

    def edit(i, messages):
        sent.append(messages)
        if i == 0:  # the harness rewrites the task in place; nothing else changes
            return [messages[0], {"role": "user", "content": USER["content"] + " (and b.txt)"}, *messages[2:]]
        return messages

    trajectory = run(conversation(proxy, 2, edit=edit))
    assert [c["kind"] for c in trajectory["calls"]] == ["clean", "fork", "clean"]
    rollout = proxy.registry.by_id[trajectory["id"]]
    dialect = proxy.app.dialects["chat"]
    prompts = [[SYSTEM, USER], [sent[0][0], {"role": "user", "content": USER["content"] + " (and b.txt)"},
                                *sent[0][2:]], sent[1]]
    for record, messages in zip(rollout.trajectory.calls, prompts, strict=True):
        request = dialect.parse({"messages": messages, "tools": TOOLS})
        text = proxy.template.render(request.messages, request.tools, True)
        assert record.head == {"len": len(text), "sha": text_sha(text), "n": len(messages)}
    assert sum(head.text is not None for head in rollout.lineage.heads.values()) == 1  # one text per rollout
    assert rollout.lineage.heads[1].text is not None  # the newest


def test_a_restarted_proxy_recovers_rollouts_and_continues_them():
    proxy = InProcessProxy([write_call("a"), ScriptTurn(text="done")])

    async def first_half():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client, {"task": "hello"})
            reply = await chat(proxy, client, token, [SYSTEM, USER])
            return rollout_id, token, reply, await proxy.trajectory(client, rollout_id)

    rollout_id, token, reply, before = run(first_half())
    proxy.registry.by_id[rollout_id].log.append({"t": "start", "i": 1}, sync=False)  # a call cut off mid-way
    restarted = InProcessProxy([ScriptTurn(text="done")], data_dir=proxy.data_dir)

    async def second_half():
        async with restarted.client() as client:
            recovered = await restarted.trajectory(client, rollout_id)
            await chat(restarted, client, token, [SYSTEM, USER, reply] + tool_results(reply))
            return recovered, await restarted.trajectory(client, rollout_id)

    recovered, after = run(second_half())
    assert recovered["segments"] == before["segments"] and recovered["metadata"] == {"task": "hello"}
    assert recovered["counts"]["interrupted"] == 1
    assert after["counts"]["clean"] == 2 and len(after["segments"]) == 1  # the same segment, continued


# -- the trajectory model itself ------------------------------------------------------------------

def records() -> list[CallRecord]:
    return [CallRecord(0, "ok", "clean", segment=0, prompt_suffix=[1, 2, 3], response=[4, 5], logprobs=[-0.5, -0.25]),
            CallRecord(1, "engine_error", error="down"),
            CallRecord(2, "ok", "realigned", segment=0, base=(0, 5), prompt_suffix=[6], response=[7],
                       logprobs=[-1.0]),
            CallRecord(3, "ok", "fork", segment=1, base=(0, 3), prompt_suffix=[9], response=[10], logprobs=[-2.0])]


def test_records_merge_into_segments_with_aligned_masks_and_logprobs():
    trajectory = Trajectory("r-1", metadata={"task": "t"})
    for record in records():
        trajectory.add(record)
    first, branch = trajectory.segments
    assert first.prompt_ids == [1, 2, 3] and first.response_ids == [4, 5, 6, 7]
    assert first.response_mask == [1, 1, 0, 1] and first.logprobs == [-0.5, -0.25, 0.0, -1.0]
    assert branch.prompt_ids == [1, 2, 3, 9] and branch.response_ids == [10]
    assert trajectory.counts() == {"clean": 1, "realigned": 1, "fork": 1, "engine_error": 1,
                                   "client_disconnected": 0, "interrupted": 0}


def test_wire_format_round_trips_and_is_compact():
    record = records()[2]
    wire = record.to_wire()
    assert CallRecord.from_wire(json.loads(json.dumps(wire))) == record
    ids = list(range(1000, 3000))
    assert unpack_ids(pack_ids(ids)) == ids and len(pack_ids(ids)) < len(json.dumps(ids))


def test_export_jsonl_and_parquet_put_reward_and_metadata_on_every_segment(tmp_path):
    trajectory = Trajectory("r-1", metadata={"task": "t", "harness": "codex"})
    for record in records():
        trajectory.add(record)
    trajectory.reward, trajectory.status = 1.0, "completed"
    rows = [json.loads(line) for line in export_jsonl([trajectory], tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["reward"] for r in rows] == [1.0, 1.0] and rows[1]["metadata"]["harness"] == "codex"
    table = pq.read_table(export_parquet([trajectory], tmp_path / "t.parquet")).to_pylist()
    assert table[0]["response_mask"] == [1, 1, 0, 1] and table[1]["prompt_ids"] == [1, 2, 3, 9]
    assert table[0]["logprobs"] == pytest.approx([-0.5, -0.25, 0.0, -1.0])
    assert json.loads(table[1]["metadata"])["task"] == "t" and table[1]["status"] == "completed"
    assert json.loads(table[0]["timings"])["calls"] == 4 and rows[0]["timings"]["calls"] == 4


def test_rollout_logs_keep_few_files_open_and_lose_no_event(tmp_path):
    from openforgerl.rollout.proxy.store import Store

    store = Store(tmp_path, max_open=2)
    logs = [store.open_log(f"r-{i}") for i in range(5)]
    for round_ in range(3):
        for log in logs:
            log.append({"t": "call", "round": round_})
    assert sum(log._fd >= 0 for log in logs) <= 2
    assert [len(events) for _, events in [(p, p.read_text().splitlines()) for p in sorted(store.root.iterdir())]] == [3] * 5


def test_finished_rollouts_leave_memory_and_are_read_back_from_their_logs():
    proxy = InProcessProxy([write_call("a")])
    proxy.registry.keep_finished = 1
    admin = {"authorization": "Bearer test-admin-token"}

    async def scenario():
        async with proxy.client() as client:
            made = [await proxy.new_rollout(client, {"n": i}) for i in range(3)]
            before = {}
            for rollout_id, token in made:
                await chat(proxy, client, token, [SYSTEM, USER])
                before[rollout_id] = await proxy.trajectory(client, rollout_id)
                await client.post(f"/rollouts/{rollout_id}/finish", json={"reward": 0.5}, headers=admin)
            after = {rollout_id: await proxy.trajectory(client, rollout_id) for rollout_id, _ in made}
            listed = (await client.get("/rollouts", headers=admin)).json()["rollouts"]
            again = await client.post(f"/rollouts/{made[0][0]}/finish", json={}, headers=admin)
            late = await client.post(PATHS["chat"], json={"messages": [USER]},
                                     headers={"authorization": f"Bearer {made[0][1]}"})
            return made, before, after, listed, again, late

    made, before, after, listed, again, late = run(scenario())
    assert len(proxy.registry.by_id) == 1 and len(proxy.registry.retired) == 2
    for rollout_id, _ in made:
        assert after[rollout_id]["segments"] == before[rollout_id]["segments"]
        assert after[rollout_id]["reward"] == 0.5 and after[rollout_id]["status"] == "completed"
    assert sorted(r["id"] for r in listed) == sorted(r for r, _ in made)
    assert again.status_code == 409 and late.status_code == 401
