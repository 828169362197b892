"""The proxy's render and token caches give exactly what a full render and a full encode give.

The policy's real template (SmolLM2, tool-capable) is rendered run by run of same-role messages from
cached texts, and encoded turn by turn from cached ids; both must equal the one-shot results for any
agent loop, and a template that is not concatenative must be caught and rendered in full.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from openforgerl.rollout.proxy import template as template_module
from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.rollout.proxy.template import HFChatTemplate
from openforgerl.rollout.trajectory import common_prefix, packed
from openforgerl.testing.proxy import PATHS, InProcessProxy, policy_template, thinking_template

TOOLS = [{"type": "function", "function": {"name": n, "description": f"{n} things",
                                           "parameters": {"type": "object", "properties": {"p": {"type": "string"}}}}}
         for n in ("ls", "cat")]
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
call = st.fixed_dictionaries({"id": st.sampled_from(["c1", "c2"]), "type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": st.sampled_from(["ls", "cat"]), "arguments": st.one_of(
        st.just('{"p": "x"}'), st.dictionaries(st.sampled_from(["p", "n"]), st.integers(0, 9), max_size=2))})})
message = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": text}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(st.none(), text)},
                          optional={"tool_calls": st.lists(call, min_size=1, max_size=2)}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": text, "tool_call_id": st.just("c1")}))


@pytest.fixture(scope="module")
def policy() -> HFChatTemplate:
    template = policy_template()
    assert isinstance(template, HFChatTemplate)
    return template


@pytest.fixture(scope="module")
def thinking(policy) -> HFChatTemplate:  # (after ``policy``: the tokenizer is the policy's)
    return thinking_template()


def spot_checks(monkeypatch, first: int, every: int) -> None:
    """Compare a template's first ``first`` incremental renders with full ones, then one in ``every``."""
    monkeypatch.setattr(template_module, "VERIFY_FIRST", first)
    monkeypatch.setattr(template_module, "VERIFY_EVERY", every)


def under(policy: HFChatTemplate, chat_template: str) -> HFChatTemplate:
    """The policy's tokenizer under another chat template."""
    tokenizer = copy.deepcopy(policy.tokenizer)
    tokenizer.chat_template = chat_template
    return HFChatTemplate(tokenizer)


def test_the_policy_template_is_rendered_incrementally(policy):
    policy.render([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], TOOLS, True)
    assert policy._incremental is True  # the shipped template passes the check: prompts come from the caches


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(system=text, rest=st.lists(message, max_size=9), tools=st.booleans(), gen=st.booleans())
def test_cached_render_and_encode_equal_the_full_ones(policy, system, rest, tools, gen):
    messages = [{"role": "system", "content": system}, *rest]
    full = policy.full_render(messages, TOOLS if tools else None, gen)
    for _ in range(2):  # cold, then from the caches
        assert policy.render(messages, TOOLS if tools else None, gen) == full
        assert policy.encode_prompt(full) == policy.encode(full)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(picks=st.lists(st.integers(min_value=0), max_size=40), skip=st.booleans())
def test_decode_gives_what_the_tokenizer_decodes(policy, picks, skip):
    """The proxy decodes with the tokenizers backend (no transformers wrapper): the same text, specials too."""
    special = sorted(policy.tokenizer.all_special_ids)
    ids = [special[p % len(special)] if p % 5 == 0 else p % len(policy.tokenizer) for p in picks]
    assert policy.decode(ids, skip) == policy.tokenizer.decode(ids, skip_special_tokens=skip)
    assert policy._direct_decode is True


BPE_TEXT = st.lists(st.sampled_from([*"ab Zé漢😀0123 9.,;'!?-_()[]{}\"\n\t\r\u00a0\u200b\x04\x1d", "'s", "'ll", "  ",
                                     "\n\n", "<|im_end|>"]), max_size=120).map("".join)
"""What BPE splits on, in runs: letters, digits, marks, spaces, newlines, other scripts, control characters the
vocabulary has no token for, special tokens."""


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.text(max_size=300) | BPE_TEXT | st.sampled_from(["<|im_end|>\n<|im_start|>user\nhi", "a<tool_call>\n{}",
                                                                "x<|im_start|>", "<|endoftext|><|endoftext|>"]))
def test_encode_gives_the_tokenizer_s_own_ids(policy, text):
    """The proxy tokenises with tiktoken running the tokenizer's own BPE (~3x faster than tokenizers here), or
    else the backend's ``encode_batch_fast`` (no offsets built): either way the ids are the tokenizer's own,
    special tokens and any text included."""
    assert policy.encode(text) == policy.tokenizer.encode(text, add_special_tokens=False)
    assert policy._tiktoken  # the shipped tokenizer passes the check: tiktoken it is


def test_without_tiktoken_the_backend_encodes_fast(policy, monkeypatch):
    from copy import deepcopy

    monkeypatch.setenv("FORGE_PROXY_TIKTOKEN", "0")
    template = HFChatTemplate(deepcopy(policy.tokenizer))
    assert template.encode("hello  world\n\n") == policy.tokenizer.encode("hello  world\n\n", add_special_tokens=False)
    assert template._tiktoken is False and template._fast_encode is True


def test_a_backend_whose_fast_encode_differs_or_is_missing_encodes_as_before(policy):
    from copy import deepcopy

    class Off:  # a backend whose encode_batch_fast gives other ids than encode
        def __init__(self, real) -> None:
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def encode_batch_fast(self, texts, add_special_tokens=True):
            return [type("E", (), {"ids": [0, *e.ids]})() for e in self.real.encode_batch(texts, add_special_tokens)]

    for backend in (Off(policy._backend), type("Old", (), {"encode": policy._backend.encode,
                                                               "encode_batch": policy._backend.encode_batch})()):
        template = HFChatTemplate(deepcopy(policy.tokenizer))
        template._backend, template._tiktoken = backend, False
        assert template.encode("hello world") == policy.tokenizer.encode("hello world", add_special_tokens=False)
        assert template._fast_encode is False


def test_a_tokenizer_that_cleans_up_spaces_decodes_through_transformers(policy):
    """A tokenizer whose decode changes the backend's text (transformers' clean-up of spaces before punctuation,
    on for some WordPiece tokenizers) keeps its own decode: the backend alone would give other text."""
    tokenizer = copy.copy(policy.tokenizer)
    tokenizer.decode = lambda ids, skip_special_tokens=False: policy.tokenizer.decode(
        ids, skip_special_tokens=skip_special_tokens).replace(" .", ".").replace(" ,", ",")
    template = HFChatTemplate(tokenizer)
    ids = policy.encode("Hello , world .")
    assert template.decode(ids) == "Hello, world."
    assert template._direct_decode is False


def test_a_template_that_is_not_concatenative_is_rendered_in_full(policy):
    """A template that writes something only after the last message breaks per-run caching: the check
    at first use catches it, and every render is the full one."""
    odd = under(policy, "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                        "{% if loop.last %} (last){% endif %}<|im_end|>\n{% endfor %}"
                        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"}]
    assert odd.render(messages, None, True) == odd.full_render(messages, None, True)
    assert odd._incremental is False
    assert odd.render(messages, None, True).count("(last)") == 1


def test_a_template_showing_reasoning_only_after_the_last_user_message_renders_conversations_with_it_in_full(
        policy, thinking, monkeypatch):
    """Such a template renders an answer alone (after the anchor: no user message) without its reasoning, and in
    an agent loop with it: cached runs would drop the reasoning the model wrote. The check finds that only
    answers holding think tags differ: conversations with one render in full (but for what a call adds after a
    kept prompt: rendered after a user message), the others run by run."""
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": "<think>\nlook first\n</think>\n\nLooking.", "tool_calls": [
                    {"type": "function", "function": {"name": "ls", "arguments": {"p": "."}}}]},
                {"role": "tool", "content": "a.txt"}]
    full = thinking.full_render(messages, None, True)
    assert "look first" in full
    assert thinking.render(messages, None, True) == full
    assert thinking._incremental is True and thinking._thinking_in_full is True and thinking._thinking_after_query
    assert thinking.render(messages[:3] + [{"role": "user", "content": "and?"}], None, True).count("look first") == 0
    kept = thinking.render(messages[:2], None, True)
    asked: list[int] = []
    full_render = thinking.full_render

    def spy(chat, tools, gen):
        asked.append(len(chat))
        return full_render(chat, tools, gen)
    monkeypatch.setattr(thinking, "full_render", spy)
    spot_checks(monkeypatch, 0, 10**9)  # no spot check: only what the render itself asks
    # What a call adds after a kept prompt renders after a user message, as in its conversation: the reasoning shows.
    assert thinking.render_after(kept, messages, 2, None) == full and asked == [2 + 2]  # anchor, query, 2 new
    again = [*messages[:2], {"role": "user", "content": "and?"}, *messages[2:]]
    assert thinking.render_after(kept, again, 2, None) is None  # a user message after it: earlier answers change
    monkeypatch.undo()
    plain = copy.deepcopy(messages)
    plain[2]["content"] = "Looking."
    thinking._texts.clear()
    assert thinking.render(plain, None, True) == thinking.full_render(plain, None, True)
    assert len(thinking._texts._values) == 4  # the head and three runs: rendered run by run
    assert policy._thinking_in_full is False  # the policy's template writes an answer as it is, wherever it is


async def agent_loop(client, token: str, calls: int, output: str) -> list[dict]:
    """``calls`` calls of an agent loop through the proxy: each answer and its tools' outputs (``output``, formatted
    with the call's index) or a user's next message appended; the history it ends with."""
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "go"}]
    for i in range(calls):
        answer = await client.post(PATHS["chat"], headers={"authorization": f"Bearer {token}"},
                                   json={"messages": messages, "tools": TOOLS})
        assert answer.status_code == 200, answer.text
        reply = answer.json()["choices"][0]["message"]
        follow = [{"role": "tool", "tool_call_id": c["id"], "content": output.format(i=i)}
                  for c in reply.get("tool_calls") or []] or [{"role": "user", "content": f"next {i}"}]
        messages = [*messages, reply, *follow]
    return messages


def vllm_template(name: str) -> Path:
    """A chat template file vLLM ships (found without importing vLLM)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vLLM is not installed: its shipped chat templates are not here")
    path = Path(spec.origin).parent / "transformers_utils" / "chat_templates" / name
    if not path.exists():
        pytest.skip(f"this vLLM does not ship {name}")
    return path


def test_a_qwen3_derived_template_shipped_with_vllm_renders_reasoning_loops_as_itself(policy, monkeypatch):
    """MiniCPM-V 4.5's template (shipped with vLLM) has Qwen3's rules: an answer's reasoning shows only after the
    last user message, an answer may be written with a `<think>` block when it is the last message, and a content
    of None fails it (the proxy's messages never hold one). Agent loops through the proxy, with and without
    reasoning, every render checked against the template's own."""
    real = under(policy, vllm_template("template_minicpmv45.jinja").read_text())
    real.prepare()
    assert real._incremental and real._thinking_in_full and real._thinking_after_query and real._slots
    monkeypatch.setattr(template_module, "CHECK_RENDER", True)
    for why in ("<think>\nplan\n</think>\n\n", ""):
        turns = [ScriptTurn(text=f"{why}Looking.", tool_calls=[{"name": "ls", "arguments": {"p": "."}}]),
                 ScriptTurn(text=f"{why}Done.")]
        proxy = InProcessProxy(turns, template=real)

        async def loop() -> dict:
            async with proxy.client() as client:
                rollout_id, token = await proxy.new_rollout(client)
                await agent_loop(client, token, 4, "out {i}")
                return await proxy.trajectory(client, rollout_id)
        trajectory = asyncio.run(loop())
        assert [c["status"] for c in trajectory["calls"]] == ["ok"] * 4


def test_a_conversation_ending_in_an_answer_renders_as_the_template_writes_it(policy):
    """vLLM's ChatML template leaves a last answer open (no end of turn, no generation prompt): such a conversation
    (an answer to go on) renders in full; the others from the caches, reasoning or not."""
    chatml = under(policy, vllm_template("template_chatml.jinja").read_text())
    chatml.prepare()
    assert chatml._incremental and not chatml._thinking_in_full  # it writes an answer as it is, wherever it is
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
            {"role": "assistant", "content": "<think>\nhm\n</think>\n\nThe answer is"}]
    for n, gen in ((2, True), (3, True), (3, False)):
        assert chatml.render(chat[:n], None, gen) == chatml.full_render(chat[:n], None, gen)
    assert chatml.render(chat, None, False).endswith("The answer is")  # left open, to go on
    assert not chatml.render(chat, None, True).endswith("<|im_start|>assistant\n")  # no second answer begun
    kept = chatml.render(chat[:2], None, True)
    assert chatml.render_after(kept, chat, 2, None) is None


def test_a_template_that_differs_only_on_real_traffic_is_caught_by_the_spot_checks(policy, monkeypatch, caplog):
    """The samples cannot show every dependence on neighbours: this template numbers user turns past the second
    (the samples have two). Incremental renders are compared with full ones (the first ones, then one in
    ``VERIFY_EVERY``): the first difference turns incremental rendering off, with a warning, and the call gets
    the full render."""
    counting = under(policy, (
        "{% set ns = namespace(users=0) %}{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'user' %}{% set ns.users = ns.users + 1 %}{% if ns.users > 2 %}(again) {% endif %}{% endif %}"
        "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"))
    spot_checks(monkeypatch, 1, 3)
    chat = [{"role": "system", "content": "s"}]
    for turn in range(3):
        chat += [{"role": "user", "content": f"q{turn}"}, {"role": "assistant", "content": f"a{turn}"}]
    two, three = chat[:4], chat[:6]
    with caplog.at_level("WARNING", logger=template_module.__name__):
        assert counting.render(two, None, True) == counting.full_render(two, None, True)  # verified: the same
        assert counting._incremental is True
        assert "(again)" not in counting.render(three, None, True)  # not checked: the cached runs' text, wrong
        assert counting.render(three, None, True) == counting.full_render(three, None, True)  # checked: caught
    assert counting._incremental is False and "(again)" in counting.render(chat, None, True)
    assert "otherwise than message by message" in caplog.text and "every prompt is rendered in full" in caplog.text


def test_a_spot_check_that_finds_the_after_query_render_wrong_gives_up_that_way_only(policy, monkeypatch, caplog):
    """What a call adds to a reasoning model's agent loop is rendered after a user message; should that ever differ
    from the full render on real traffic, only that way is given up (such conversations then render in full), and
    a kept prompt gone stale (the full render still ends with what was added) gives nothing up."""
    thinking = thinking_template()
    thinking.prepare()
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": "<think>\nlook\n</think>\n\nLooking."},
                {"role": "tool", "content": "a.txt"}]
    full = thinking.full_render(messages, None, True)
    kept = thinking.full_render(messages[:2], None, True)
    monkeypatch.setattr(template_module, "VERIFY_FIRST", 10**9)  # every render checked
    with caplog.at_level("WARNING", logger=template_module.__name__):
        assert thinking.render_after(kept.replace("fix it", "fix that"), messages, 2, None) == full  # stale kept
        assert thinking._thinking_after_query is True and not caplog.text
        wrong = thinking._after_query
        monkeypatch.setattr(thinking, "_after_query", lambda new: wrong(new).replace("look", "peek"))
        assert thinking.render_after(kept, messages, 2, None) == full
    assert thinking._thinking_after_query is False and thinking._incremental is True
    assert "rendered in full from now on" in caplog.text
    assert thinking.render_after(kept, messages, 2, None) is None  # from now on: the full render (lineage's)
    assert thinking.render(messages[:2], None, True) == kept  # conversations without reasoning: run by run still


def test_a_cached_text_gone_stale_is_rendered_again_and_the_caches_stay_on(policy, monkeypatch, caplog):
    """A template that writes today's date: past midnight the cached system turn is yesterday's. The spot check
    finds the difference, renders the runs afresh, which agree with the full render: a stale text, not a template
    that depends on neighbours, so incremental rendering stays on."""
    import datetime as real

    from transformers.utils import chat_template_utils

    class Clock:
        day = 4

        @classmethod
        def now(cls):
            return real.datetime(2026, 12, cls.day, 23, 59)
    monkeypatch.setattr(chat_template_utils, "datetime", Clock)
    dated = under(policy, (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if loop.first %}Today: {{ strftime_now('%d %b') }}\n"
        "{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% endif %}"))
    spot_checks(monkeypatch, 0, 1)
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    with caplog.at_level("WARNING", logger=template_module.__name__):
        assert "04 Dec" in dated.render(chat, None, True)
        Clock.day = 5
        assert "05 Dec" in dated.render(chat, None, True)
        assert dated._incremental is True and "05 Dec" in dated._by_message(chat, None, True)
    assert "otherwise than message by message" not in caplog.text


def test_common_prefix_matches_a_plain_scan():
    rng = random.Random(7)
    for _ in range(300):
        a = [rng.randrange(50_000) for _ in range(rng.randrange(0, 300))]
        b = a[:rng.randrange(0, len(a) + 1)] + [rng.randrange(50_000) for _ in range(rng.randrange(0, 40))]
        expected = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        assert common_prefix(a, b) == common_prefix(packed(a), packed(b)) == expected


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(st.sampled_from(["continue", "continue", "tool", "edit", "resend", "restart"]),
                      min_size=1, max_size=7), reasoning=st.booleans())
@example(steps=["continue", "continue", "continue"], reasoning=True)  # an answer with reasoning after the last user
def test_agent_loops_through_the_proxy_match_a_full_render_on_every_call(policy, thinking, monkeypatch, steps,
                                                                          reasoning):
    """Clean, realigned and forked calls with the render checked against a full render on every call
    (FORGE_PROXY_CHECK_RENDER's mode): any difference would fail the call. ``reasoning``: a reasoning model's
    answers (think tags) under a template that shows them only after the last user message."""
    monkeypatch.setattr(template_module, "CHECK_RENDER", True)
    why = "<think>\nplan é\n</think>\n\n" if reasoning else ""
    turns = [ScriptTurn(text=f"{why}Done. é"),
             ScriptTurn(text=why, tool_calls=[{"name": "ls", "arguments": {"p": "."}}])]
    proxy = InProcessProxy(turns, template=thinking if reasoning else policy)

    async def loop() -> dict:
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "go"}]
            for i, step in enumerate(steps):
                answer = await client.post(PATHS["chat"], headers={"authorization": f"Bearer {token}"},
                                           json={"messages": messages, "tools": TOOLS})
                assert answer.status_code == 200, answer.text
                reply = answer.json()["choices"][0]["message"]
                if step in ("continue", "tool"):
                    follow = [{"role": "tool", "tool_call_id": c["id"], "content": f"out {i}"}
                              for c in reply.get("tool_calls") or []] or [{"role": "user", "content": f"next {i}"}]
                    messages = [*messages, reply, *follow]
                elif step == "edit":
                    messages = [*messages[:-1], {"role": "user", "content": f"edited {i}"}]
                elif step == "restart":
                    messages = messages[:2]
            return await proxy.trajectory(client, rollout_id)
    trajectory = asyncio.run(loop())
    assert len(trajectory["calls"]) == len(steps)
    assert all(c["status"] == "ok" for c in trajectory["calls"])


def test_a_built_proxy_has_made_its_template_checks_before_the_first_call(policy, tmp_path, monkeypatch):
    """``build_app`` prepares the template (render and encode checks, the byte table, the longest token), so
    a fresh shard's first call does not wait for them (they took ~0.25 s of the first call before)."""
    from copy import deepcopy

    fresh = HFChatTemplate(deepcopy(policy.tokenizer))
    InProcessProxy(data_dir=tmp_path, template=fresh)

    def again(*_args, **_kwargs):
        raise AssertionError("a one-time check ran again at call time")
    for name in ("_check_incremental", "_check_piecewise", "_byte_table", "_check_fast_encode"):
        monkeypatch.setattr(fresh, name, again)
    monkeypatch.setattr(fresh.tokenizer, "get_vocab", again)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u é"}]
    text = fresh.render(messages, TOOLS, True)
    assert text == policy.full_render(messages, TOOLS, True)
    assert fresh.encode_prompt(text) == policy.encode(text)
    assert fresh.token_bytes() and fresh.max_token_chars() > 1


def test_a_call_extending_the_kept_prompt_renders_only_its_new_messages(policy, monkeypatch):
    """The rollout's newest head keeps its prompt text and the hash of the messages it came from: a call whose
    history starts with those messages renders only what follows (the same text as a full render: checked on
    every call here); an edited history renders in full."""
    monkeypatch.setattr(template_module, "CHECK_RENDER", True)
    fresh = HFChatTemplate(policy.tokenizer)
    full_renders, after = [], []
    render, render_after = fresh.render, fresh.render_after
    monkeypatch.setattr(fresh, "render", lambda *a: full_renders.append(len(a[0])) or render(*a))
    monkeypatch.setattr(fresh, "render_after", lambda *a: after.append(a[2]) or render_after(*a))
    proxy = InProcessProxy([ScriptTurn(tool_calls=[{"name": "ls", "arguments": {"p": "."}}]),
                            ScriptTurn(text="Done.")], template=fresh)
    full_renders.clear()  # the template's own checks, when the proxy was built

    async def loop() -> dict:
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            messages = await agent_loop(client, token, 4, "out {i}\n" * 3)
            edited = [messages[0], {"role": "user", "content": "edited"}, *messages[2:]]
            answer = await client.post(PATHS["chat"], headers={"authorization": f"Bearer {token}"},
                                       json={"messages": edited, "tools": TOOLS})
            assert answer.status_code == 200, answer.text
            return await proxy.trajectory(client, rollout_id)
    trajectory = asyncio.run(loop())
    assert [c["kind"] for c in trajectory["calls"]] == ["clean"] * 4 + ["fork"]
    assert after == [2, 4, 6]  # calls 2-4 render after their first 2, 4, 6 messages
    assert full_renders == [2, 10]  # the first call, and the edited history (its hash differs)


@pytest.mark.parametrize("reasoning", [False, True])
def test_a_call_sent_again_takes_the_kept_prompt_without_rendering(policy, thinking, monkeypatch, reasoning):
    """A harness that forks on every call sends the same conversation again: its text is the rollout's kept prompt
    (no render at all, even for a conversation with reasoning, which a reasoning template renders in full), and the
    new segment's prompt is the first call's, token for token."""
    monkeypatch.setattr(template_module, "CHECK_RENDER", True)
    fresh = HFChatTemplate((thinking if reasoning else policy).tokenizer)
    renders: list[int] = []
    render, render_after = fresh.render, fresh.render_after
    monkeypatch.setattr(fresh, "render", lambda *a: renders.append(len(a[0])) or render(*a))
    monkeypatch.setattr(fresh, "render_after", lambda *a: renders.append(len(a[1])) or render_after(*a))
    proxy = InProcessProxy([ScriptTurn(text="Done.")], template=fresh)
    why = "<think>\nplan\n</think>\n\n" if reasoning else ""
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "go"},
                {"role": "assistant", "content": f"{why}Looking."}, {"role": "user", "content": "and?"}]
    renders.clear()

    async def loop() -> dict:
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            for _ in range(3):
                answer = await client.post(PATHS["chat"], headers={"authorization": f"Bearer {token}"},
                                           json={"messages": messages, "tools": TOOLS})
                assert answer.status_code == 200, answer.text
            return await proxy.trajectory(client, rollout_id)
    trajectory = asyncio.run(loop())
    assert renders == [4]  # the first call only
    assert [c["kind"] for c in trajectory["calls"]] == ["clean", "fork", "fork"]
    prompts = [segment["prompt_ids"] for segment in trajectory["segments"]]
    assert len(prompts) == 3 and prompts[1] == prompts[2] == prompts[0]


def test_arguments_in_another_order_render_in_that_order(policy):
    """A template writes a tool call's arguments object as JSON in its keys' order: two calls that differ only in
    that order are two texts (the caches once keyed runs with sorted keys and gave the second the first's text)."""
    def answer(arguments: dict) -> list[dict]:
        return [{"role": "system", "content": "s"}, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": arguments}}]}]
    first, second = answer({"a": 1, "b": 2}), answer({"b": 2, "a": 1})
    for messages in (first, second, first):
        assert policy.render(messages, None, True) == policy.full_render(messages, None, True)
    assert policy.render(first, None, True) != policy.render(second, None, True)
