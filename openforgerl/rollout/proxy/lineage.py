"""Prefix reuse: find the segment a new call extends and build its prompt from the exact old ids.

Key invariant: a call's prompt ids start with the *exact* ids of the segment it extends (the
engine's sampled tokens, never a re-tokenisation), followed by the tokenised new suffix. A call
extends a segment when its messages render to that segment's last prompt text, followed by an
assistant message equal to what the model answered there. Anything else starts a new segment.

Heads keep only a hash and a length of the last prompt text, so memory does not grow with the
conversation, and a head can be rebuilt from the write-ahead log after a restart.

Planning is two steps: ``draft`` (render, hash, tokenise: the expensive part, run in a worker thread
against a snapshot of the heads) and ``reserve`` (on the event loop: claim the head it extends, or
branch when another call got there first). The proxy drafts one call of a rollout at a time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import orjson

from openforgerl.rollout.proxy.conversation import ContextTooLong
from openforgerl.rollout.proxy.template import ChatTemplate
from openforgerl.rollout.proxy.tool_parser import ToolParser, kept_markers
from openforgerl.rollout.trajectory import CallKind, CallRecord, Trajectory, packed

SLACK = 1.25
"""Headroom of the character pre-check: a re-rendered history may be a little longer than the text
of the exact ids it reuses (JSON re-serialised with spaces)."""


def text_sha(text: str) -> str:
    return hashlib.sha1(utf8(text)).hexdigest()


def utf8(text: str) -> bytes:
    """``text`` as the hashes take it (a lone surrogate too: the bytes of a concatenation are the
    concatenation of the bytes, so a hash can go on where another stopped)."""
    return text.encode("utf-8", "surrogatepass")


def reply_key(content: str, calls: list[tuple[str, Any]]) -> str:
    """What must match between the model's answer and the assistant message sent back later."""
    return json.dumps([content.strip(), [[name, args] for name, args in calls]], sort_keys=True)


def message_reply_key(message: dict[str, Any]) -> str:
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return reply_key(message.get("content") or "", calls)


MIN_SHARED = 32
"""A fork stores a reference to an earlier segment's ids only when they share at least this many tokens."""


SHARED_CANDIDATES = 4
"""How many of the newest segments a fork is compared with (a bound: a rollout may fork thousands of times)."""


def shared_base(ids: list[int], heads: list[Head], trajectory: Trajectory) -> tuple[int, int] | None:
    """The (segment, length) of the longest stretch of recorded ids a fork's prompt starts with, among the
    newest segments, so its record stores that reference plus its own suffix instead of the whole prompt
    (readers expand it). Only ids up to each head are read: those never change while the event loop records."""
    best: tuple[int, int] | None = None
    mine = packed(ids)
    for head in sorted(heads, key=lambda h: -h.segment)[:SHARED_CANDIDATES]:
        shared = trajectory.segments[head.segment].common_prefix(mine, head.n_ids)
        if shared >= MIN_SHARED and (best is None or shared > best[1]):
            best = (head.segment, shared)
    return best


def check_fits(tokens: int, limit: int, stopped_early: bool = False) -> None:
    """Refuse a prompt that leaves no room to sample (``limit`` 0: unknown, unchecked). ``stopped_early``:
    the count comes from an encoding that may have stopped once past ``limit``, so it is a lower bound."""
    if limit and tokens >= limit:
        raise ContextTooLong(tokens, limit, at_least=stopped_early and tokens > limit)


@dataclass
class Head:
    """The end of a segment: what the next call of that lineage must start with."""

    segment: int
    n_ids: int
    text_len: int
    text_sha: str
    n_messages: int
    answer_ids: list[int]  # forced + sampled ids of the last call
    ended_on_stop: bool
    reply: str | None = None
    """What the next call's assistant message must match (``reply_key``), worked out from ``answer_ids`` at
    first use (``Lineage.reply``): the proxy does it after the answer went out, not before."""
    busy: bool = False
    text: str | None = None
    """The prompt text ``text_len`` and ``text_sha`` describe, kept on the rollout's newest head only (one
    text per live rollout; recovered heads have none): a call extending it compares its text's start with
    this instead of hashing it, and hashes only what it adds (``hasher``: the SHA-1 after this text)."""
    hasher: Any = None
    messages_sha: str | None = None
    """``messages_sha`` of the tools and messages ``text`` was rendered from (kept with ``text``): a call whose
    first ``n_messages`` messages give the same renders only the rest (``ChatTemplate.render_after``)."""


def messages_sha(hasher: Any, messages: list[dict[str, Any]]) -> None:
    """Go on with ``hasher`` over ``messages``, one by one (so the state after a list's first messages is the state
    of those messages alone)."""
    for message in messages:
        hasher.update(orjson.dumps(message))


@dataclass
class Plan:
    """How one call's prompt was built."""

    kind: CallKind
    prompt_ids: list[int]
    base: tuple[int, int] | None
    prompt_suffix: list[int]
    extends: Head | None  # the head this call continues in place (reserved while in flight)
    text_len: int
    text_sha: str
    n_messages: int
    text: str | None = None  # the prompt text and its hash's state, for the head this call leaves
    hasher: Any = None
    messages_sha: str | None = None  # of the tools and messages ``text`` was rendered from

    def head_info(self) -> dict[str, Any]:
        return {"len": self.text_len, "sha": self.text_sha, "n": self.n_messages}


class Lineage:
    """The heads of one rollout's segments."""

    def __init__(self, template: ChatTemplate, parser: ToolParser) -> None:
        self.template = template
        self.parser = parser
        self.heads: dict[int, Head] = {}
        self._texted: Head | None = None  # the one head that keeps its text
        self.tools: list[dict[str, Any]] | None = None
        """The tools of the call drafted last, which a head's answer is read with (``reply``): a syntax with
        untyped arguments (Qwen3-Coder's) types them by the tools' schemas, as the call's own parser did."""

    def snapshot(self) -> list[Head]:
        """The heads a draft may extend (taken on the event loop; ``Head`` objects are replaced, not
        changed, when a call moves them on, except for ``busy``, which only ``reserve`` reads, and ``text``
        and ``hasher``, dropped from a head that is no longer the newest: a draft reads each once, and one
        that finds them gone hashes instead)."""
        return sorted(self.heads.values(), key=lambda h: -h.text_len)

    def draft(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], heads: list[Head],
              trajectory: Trajectory, limit: int = 0) -> Plan:
        """The prompt of a call (thread-safe against the event loop: it reads only ``heads`` and the first,
        never-changing ids of segments). Raises ``ContextTooLong`` when the prompt has ``limit`` tokens or
        more (0: unchecked), by its length in characters before tokenising anything."""
        self.tools = tools
        text, sha = self._render(messages, tools, heads)
        if limit and len(text) > limit * self.template.max_token_chars() * SLACK:
            raise ContextTooLong(int(len(text) / (self.template.max_token_chars() * SLACK)), limit, at_least=True)
        for head in heads:
            plan = self._extend(head, messages, text, trajectory, limit)
            if plan is not None:
                return dataclasses.replace(plan, messages_sha=sha)
        hasher = hashlib.sha1(utf8(text))
        info = (len(text), hasher.hexdigest(), len(messages), text, hasher, sha)
        ids = self.template.encode_prompt(text, limit)
        check_fits(len(ids), limit, stopped_early=True)
        if not trajectory.segments:
            return Plan("clean", ids, None, ids, None, *info)
        base = shared_base(ids, heads, trajectory)
        return Plan("fork", ids, base, ids[base[1]:] if base else ids, None, *info)

    def _render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                heads: list[Head]) -> tuple[str, str | None]:
        """The prompt text and ``messages_sha`` of the tools and messages (None: they cannot be written as JSON).
        When the head that keeps its text was rendered from this call's first messages (same hash), only the
        rest is rendered: a call's cost does not grow with its history's runs (at scale the template's text cache
        turns over, and every run of a history was rendered again). From all of them (a call sent again, as a
        harness that forks on every call does), its text is the kept one."""
        try:
            hasher = hashlib.sha1(orjson.dumps(tools or None))
            done, text = 0, None
            for head in heads:
                kept, sha, n = head.text, head.messages_sha, head.n_messages  # each read once (see ``snapshot``)
                if kept is not None and sha is not None and 0 < n <= len(messages):
                    messages_sha(hasher, messages[:n])
                    done = n
                    if hasher.hexdigest() == sha:
                        text = kept if n == len(messages) else self.template.render_after(kept, messages, n, tools)
                    break
            messages_sha(hasher, messages[done:])
            sha = hasher.hexdigest()
        except TypeError:  # a value orjson cannot write (the template may still render it)
            sha = None
        return text if text is not None else self.template.render(messages, tools, True), sha

    @staticmethod
    def _same_start(head: Head, text: str) -> tuple[bool, Any]:
        """Whether ``text`` starts with the text ``head`` was recorded with, and the hash's state after it
        (None: not kept). By the kept text when the head has it, else by its SHA-1."""
        kept, hasher = head.text, head.hasher  # each read once: a newer head may drop them meanwhile
        if kept is not None and hasher is not None:
            return text.startswith(kept), hasher
        return text_sha(text[:head.text_len]) == head.text_sha, None

    def reserve(self, plan: Plan) -> Plan:
        """Claim the head ``plan`` extends; if a concurrent call holds it (or moved it on meanwhile),
        the call branches into a new segment from the same exact ids."""
        head = plan.extends
        if head is None:
            return plan
        if head.busy or self.heads.get(head.segment) is not head:
            return dataclasses.replace(plan, kind="fork", extends=None)
        head.busy = True
        return plan

    def _extend(self, head: Head, messages, text: str, trajectory, limit: int) -> Plan | None:
        n, start = head.n_messages, head.text_len
        if (start >= len(text) or n >= len(messages) or messages[n]["role"] != "assistant"
                or message_reply_key(messages[n]) != self.reply(head)):
            return None
        same, hasher = self._same_start(head, text)
        if not same:
            return None
        # The model's turn was rendered right after the old prompt and ends at the first end-of-turn
        # marker (sampled text never contains it: special tokens are not decoded into content).
        eot = self.template.end_of_turn
        end = text.find(eot, start) if eot else -1
        if end < 0:
            return None
        sampled = head.answer_ids[:-1] if head.ended_on_stop else head.answer_ids
        kind: CallKind = "clean" if self.template.decode(sampled, False) == text[start:end] else "realigned"
        room = max(limit - head.n_ids, 1) if limit else 0
        suffix = self.template.encode_prompt(text[end + len(eot):] if head.ended_on_stop else text[end:], room)
        check_fits(head.n_ids + len(suffix), limit, stopped_early=True)
        prompt = trajectory.segments[head.segment].ids(head.n_ids) + suffix
        if hasher is not None:  # the kept state, on with what this call adds
            hasher = hasher.copy()
            hasher.update(utf8(text[start:]))
        else:
            hasher = hashlib.sha1(utf8(text))
        return Plan(kind, prompt, (head.segment, head.n_ids), suffix, head, len(text), hasher.hexdigest(),
                    len(messages), text, hasher)

    def reply(self, head: Head) -> str:
        """``head.reply``, worked out the first time it is asked for (by the loop once the answer is out, or by
        the next call's draft in a worker thread: either, or both, write the same string)."""
        reply = head.reply
        if reply is None:
            answer = self.template.decode_keeping(head.answer_ids, kept_markers(self.template, self.parser))
            content, calls = self.parser.parse(answer, self.tools)
            reply = head.reply = reply_key(content, [(c.name, c.arguments_object()) for c in calls])
        return reply

    def warm(self, segment: int) -> None:
        """Work out the reply of ``segment``'s head now (called once the answer is out, while the harness reads
        it), so the next call's draft finds it."""
        head = self.heads.get(segment)
        if head is not None:
            self.reply(head)

    def release(self, plan: Plan) -> None:
        if plan.extends is not None:
            plan.extends.busy = False

    def record(self, record: CallRecord, trajectory: Trajectory, plan: Plan | None = None) -> None:
        """Move the head of ``record``'s segment past it (after the trajectory applied it). ``plan``: the
        call's, when it is this proxy's own (not recovered): the new head keeps its text, the only one."""
        if record.status != "ok" or record.segment < 0 or not record.head:
            return
        answer = record.forced + record.response
        kept = plan if plan is not None and plan.text is not None and plan.text_sha == record.head["sha"] else None
        head = self.heads[record.segment] = Head(
            segment=record.segment, n_ids=len(trajectory.segments[record.segment]),
            text_len=record.head["len"], text_sha=record.head["sha"], n_messages=record.head["n"],
            answer_ids=answer, ended_on_stop=bool(record.response) and record.response[-1] in self.template.stop_ids,
            text=kept.text if kept else None, hasher=kept.hasher if kept else None,
            messages_sha=kept.messages_sha if kept else None)
        if kept:
            if self._texted is not None:
                self._texted.text = self._texted.hasher = None
            self._texted = head
