"""Memory of live rollouts is bounded like their logs: a fork holds a reference to the prefix it shares
with an earlier segment plus its own ids, never a second copy of the history. Reading a shared segment
gives exactly the ids a full copy would (property test against plain lists, chains of forks included)."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from openforgerl.rollout import trajectory as trajectory_module
from openforgerl.rollout.trajectory import Segment, packed
from openforgerl.testing.proxy import InProcessProxy

ids = st.lists(st.integers(0, 50_000), max_size=12)
# each new segment: (which earlier segment it shares with, how many of its ids, its own prompt ids, its answer)
step = st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), ids, ids)


@settings(max_examples=200, deadline=None)
@given(root=ids, root_answer=ids, steps=st.lists(step, max_size=40), probe=ids, cut=st.integers(0, 10**6))
def test_shared_segments_read_back_as_full_copies(root, root_answer, steps, probe, cut):
    segments, plain = [Segment(root)], [list(root)]
    segments[0].append(root_answer, 1)
    plain[0] += root_answer
    for which, share, own, answer in steps:
        i = which % len(segments)
        n = share % (len(plain[i]) + 1)
        segment = Segment(own, base=(segments[i], n))
        segment.append(answer, 1)
        segments.append(segment)
        plain.append(plain[i][:n] + own + answer)
    for segment, full in zip(segments, plain, strict=True):
        assert segment.ids() == full and len(segment) == len(full)
        assert segment.prompt_ids + segment.response_ids == full
        n = cut % (len(full) + 1)
        assert segment.ids(n) == full[:n]
        candidate = full[:n] + probe  # shares at least n ids with the segment
        expected = next((k for k, (a, b) in enumerate(zip(candidate, full, strict=False)) if a != b),
                        min(len(candidate), len(full)))
        assert segment.common_prefix(packed(candidate), len(full)) == expected
        assert segment._depth <= trajectory_module.MAX_SHARE_DEPTH


def test_a_chain_of_forks_stays_a_bounded_walk():
    segment = Segment(list(range(100)))
    for i in range(200):  # each fork shares all of the previous one and adds an id: the worst chain
        segment = Segment([1000 + i], base=(segment, len(segment)))
    assert segment._depth <= trajectory_module.MAX_SHARE_DEPTH
    assert segment.prompt_ids == list(range(100)) + [1000 + i for i in range(200)]


def forked_calls_memory(n_calls: int, system_repeats: int) -> tuple[int, int]:
    """Bytes the proxy keeps (traced allocations under openforgerl/, the test engine's own prompt log
    left out) over ``n_calls`` calls that each send the same long history (every call a fork), and the
    raw request bytes of one call."""
    history = [{"role": "system", "content": "You are a careful agent. " * system_repeats},
               {"role": "user", "content": "fix the test"}]
    for i in range(6):
        history += [{"role": "assistant", "content": f"running step {i}"},
                    {"role": "user", "content": f"output {i}: " + "log line\n" * 40}]
    proxy = InProcessProxy()
    body = {"model": "m", "messages": history}

    async def scenario() -> int:
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            auth = {"authorization": f"Bearer {token}"}
            for _ in range(3):  # warm caches
                assert (await client.post("/v1/chat/completions", json=body, headers=auth)).status_code == 200
            proxy.engine.prompts.clear()
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
            for _ in range(n_calls):
                assert (await client.post("/v1/chat/completions", json=body, headers=auth)).status_code == 200
            proxy.engine.prompts.clear()  # the scripted engine's record of prompts: a test double's memory
            gc.collect()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            kinds = {c["kind"] for c in (await proxy.trajectory(client, rollout_id))["calls"][3:]}
            assert kinds == {"fork"}
            mine = [tracemalloc.Filter(True, "*openforgerl*")]
            return sum(d.size_diff for d in after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename"))

    import orjson

    return asyncio.run(scenario()), len(orjson.dumps(body))


def test_a_rollout_that_forks_on_every_call_keeps_each_history_once():
    """What a forked call keeps is its record (a few kB of metadata), not its history: a 5x longer
    history costs (almost) nothing more per call. A full copy would cost 16 bytes per id here."""
    short, short_raw = forked_calls_memory(30, 200)
    long, long_raw = forked_calls_memory(30, 2000)
    per_call = long / 30
    assert per_call < 0.25 * long_raw, f"{per_call:.0f} B kept per forked call of {long_raw} B"
    assert (long - short) / 30 < 0.05 * (long_raw - short_raw), (short, long, short_raw, long_raw)


def test_an_extending_rollout_keeps_each_id_once_and_reads_back_as_recorded():
    """A call's record lets go of its ids once its segment holds them (they were a second copy of every token of
    a live rollout); the mask and log-probs are kept packed. What the rollout exports is unchanged: the same
    segments a restart reads back from the log."""
    from openforgerl.rollout.proxy.engine import ScriptTurn
    from openforgerl.rollout.proxy.rollouts import Registry
    from openforgerl.rollout.proxy.tool_parser import make_tool_parser

    proxy = InProcessProxy([ScriptTurn(text=f"answer {i}") for i in range(4)])
    messages = [{"role": "system", "content": "You act."}, {"role": "user", "content": "go"}]

    async def scenario() -> tuple[str, dict]:
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            for i in range(4):
                answer = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages},
                                           headers={"authorization": f"Bearer {token}"})
                messages.extend([answer.json()["choices"][0]["message"],
                                 {"role": "user", "content": f"tool output {i}: " + "x y " * 50}])
            return rollout_id, await proxy.trajectory(client, rollout_id)
    rollout_id, live = asyncio.run(scenario())
    rollout = proxy.registry.get(rollout_id)
    assert rollout is not None and [c.kind for c in rollout.trajectory.calls] == ["clean"] * 4
    assert all(not (c.prompt_suffix or c.forced or c.response or c.logprobs) for c in rollout.trajectory.calls)
    [segment] = live["segments"]
    assert 1 in segment["response_mask"] and len(segment["logprobs"]) == len(segment["response_ids"])
    assert all(lp <= 0 for lp in segment["logprobs"])

    recovered = Registry(proxy.template, make_tool_parser("hermes"), proxy.app.registry.store)
    recovered.recover(read_only=True)
    again = recovered.get(rollout_id)
    assert again is not None and again.trajectory.to_dict()["segments"] == live["segments"]
