"""The policy's chat template as the proxy sees it: messages + tools -> text -> token ids, and back.

Key invariant: ``render`` is *concatenative* for the templates we serve — the text of a
conversation is a prefix of the text of any conversation that extends it. The prefix logic in
``lineage.py`` relies on that and falls back to a new segment when a template breaks it.
Render and encode are called from worker threads (several rollouts at once), so templates keep
no unguarded mutable state.
"""

from __future__ import annotations

import codecs
import functools
import json
import logging
import os
import re
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Mapping, Sized
from typing import Any, Generic, TypeVar

import orjson

from openforgerl.rollout.proxy import slots

ENCODE_SAMPLES = ["", "hello world", "  two  spaces\n\n\ttab", "déjà vu 😀 漢字", "x = f(1, 2)  # 123456789",
                  "<tool_call>\n{\"name\": \"ls\"}\n</tool_call>", " " * 9 + "end"]
"""Texts on which tokenizers' ``encode_batch_fast`` must give ``encode``'s ids before the proxy uses it."""
GIL_FREE_CHARS = 4096
"""Longer texts are tokenised with the GIL released, so the event loop keeps running meanwhile."""
TURN_CACHE_ENTRIES, TURN_CACHE_IDS = 8192, 1_000_000
"""Rendered turns whose ids are kept, and their ids in all (oldest out first): system prompts, tool lists,
earlier turns. A million ids are ~40 MB of Python ints at most."""
TEXT_CACHE_ENTRIES, TEXT_CACHE_CHARS = 8192, 16_000_000
"""Runs of messages whose rendered text is kept, and their characters in all (oldest out first)."""
SHAPE_CACHE_ENTRIES = 4096
"""Shapes of message runs (see ``slots``) whose pieces are kept: a tool result, an answer, an answer calling a
given function... A shape holds no text of a message."""
USE_SLOTS = os.environ.get("FORGE_PROXY_SLOTS", "1") != "0"
"""Render a run whose texts are new through its shape when the template allows (``slots``); 0: always Jinja."""
CHECK_RENDER = os.environ.get("FORGE_PROXY_CHECK_RENDER", "") not in ("", "0")
"""Debug: render every prompt in full too and fail on any difference from the incremental render."""
VERIFY_FIRST, VERIFY_EVERY = 16, 256
"""Incremental renders also rendered in full and compared: a template's first ones, then one in this many. The
samples ``_check_incremental`` renders cannot show every way a template may depend on a message's neighbours; a
difference on real traffic turns incremental rendering off for that template (a warning says so)."""

log = logging.getLogger(__name__)

ANCHOR = {"role": "system", "content": "forge anchor"}
"""The system turn each later run of messages is rendered after, alone, to get the text that run adds."""
QUERY = {"role": "user", "content": "forge query"}
"""The user message after which the messages a call adds to a reasoning model's agent loop are rendered, as they are
in their own conversation (``HFChatTemplate._after_query``)."""
_CALL: dict[str, Any] = {"id": "call_1", "type": "function",
                         "function": {"name": "write_file", "arguments": '{"path": "a.txt"}'}}
_CALL2: dict[str, Any] = {"id": "call_2", "type": "function",
                          "function": {"name": "shell", "arguments": {"cmd": "ls -la"}}}
_TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "write_file", "description": "Write a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
_AGENT_LOOP: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix it, é 😀"},
    {"role": "assistant", "content": "Looking.", "tool_calls": [_CALL, _CALL2]},
    {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    {"role": "tool", "tool_call_id": "call_2", "content": "a.txt\nb.txt"},
    {"role": "assistant", "content": "", "tool_calls": [_CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": ""},
    {"role": "assistant", "content": "Done.  "}, {"role": "user", "content": " leading space\n\n"}]
_EDGES: list[dict[str, Any]] = [
    {"role": "system", "content": ""}, {"role": "user", "content": "x"}, {"role": "assistant", "content": ""},
    {"role": "user", "content": "<tool_call>not one</tool_call>"}]
_THINKING: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix it."},
    {"role": "assistant", "content": "<think>\nFirst look.\n</think>\n\nLooking.", "tool_calls": [_CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    {"role": "assistant", "content": "<think>\nNow test.\n</think>\n\n", "tool_calls": [_CALL2]},
    {"role": "tool", "tool_call_id": "call_2", "content": "a.txt\nb.txt"}]
"""An agent loop of a reasoning model: templates that show an answer's reasoning only after the last user message
(Qwen3's) render an answer alone otherwise than in its conversation."""
INCREMENTAL_SAMPLES: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = [
    (_AGENT_LOOP, _TOOLS), (_AGENT_LOOP, None), (_EDGES, None), (_AGENT_LOOP[:4], _TOOLS)]
"""Conversations a template must render the same way message run by message run as in one go."""
THINKING_SAMPLES: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = [
    (_THINKING, _TOOLS), (_THINKING[:4], None), ([*_THINKING, {"role": "user", "content": "And now?"}], None)]
"""The same for answers holding their reasoning: a template that passes the others but not these renders a
conversation in full when an answer of it holds a think tag (``thinking``), else run by run."""
THINK_TAGS = ("<think>", "</think>")


def thinking(messages: list[dict[str, Any]]) -> bool:
    """Whether an answer among ``messages`` holds a think tag (reasoning written into its content)."""
    for message in messages:
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, str) and \
                (THINK_TAGS[0] in content or THINK_TAGS[1] in content):
            return True
    return False


K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Sized)


class _NotIncremental(Exception):
    pass


class Bounded(Generic[K, V]):
    """A thread-safe cache holding at most ``entries`` values and ``size`` in all (a value's size is its
    ``len``); the oldest go first."""

    def __init__(self, entries: int, size: int) -> None:
        self.entries, self.size = entries, size
        self._values: dict[K, V] = {}
        self._held = 0
        self._lock = threading.Lock()

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        with self._lock:
            value = self._values.get(key)
        if value is None:
            value = make()  # outside the lock: racing threads make the same value
            with self._lock:
                if key not in self._values:
                    self._values[key] = value
                    self._held += len(value)
                while len(self._values) > self.entries or self._held > self.size:
                    self._held -= len(self._values.pop(next(iter(self._values))))
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._held = 0


class ChatTemplate(ABC):
    """What the proxy needs from a tokenizer: render, encode, decode, and the end-of-turn token."""

    @abstractmethod
    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               add_generation_prompt: bool) -> str:
        """The prompt text for ``messages`` (canonical chat dicts) and ``tools`` (function specs)."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` exactly as written (special-token text becomes special ids; no BOS)."""

    @abstractmethod
    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        """Text of ``ids``; with ``skip_special`` the turn markers are left out."""

    @property
    @abstractmethod
    def stop_ids(self) -> frozenset[int]:
        """Ids that end the assistant's turn (EOS / end-of-turn)."""

    @property
    @abstractmethod
    def end_of_turn(self) -> str:
        """The text the template writes where an assistant turn ends (e.g. ``<|im_end|>``)."""

    def token_bytes(self) -> list[bytes] | None:
        """The bytes each id decodes to (special ids: none), when decoding is per-token; else None."""
        return None

    def special_ids(self, texts: Iterable[str]) -> dict[int, str]:
        """Those of ``texts`` that are each one special token (a token ``decode`` leaves out), by id: the markers of
        a tool-call syntax spelled in special tokens, which the tool parser must see in a sampled answer."""
        kept: dict[int, str] = {}
        for text in texts:
            ids = self.encode(text)
            if len(ids) == 1 and not self.decode(ids) and self.decode(ids, False) == text:
                kept[ids[0]] = text
        return kept

    def decode_keeping(self, ids: list[int], kept: Mapping[int, str]) -> str:
        """``decode(ids)``, but the special tokens of ``kept`` (``special_ids``) written as their text."""
        if not kept or not any(i in kept for i in ids):
            return self.decode(ids)
        parts, start = [], 0
        for at, i in enumerate(ids):
            if i in kept:
                parts += [self.decode(ids[start:at]), kept[i]]
                start = at + 1
        parts.append(self.decode(ids[start:]))
        return "".join(parts)

    def render_after(self, text: str, messages: list[dict[str, Any]], start: int,
                     tools: list[dict[str, Any]] | None) -> str | None:
        """``render(messages, tools, True)`` from ``text``, the render of ``messages[:start]`` (the same tools, with
        the generation prompt), rendering only what comes after ``start``; None when the template cannot."""
        return None

    def encode_prompt(self, text: str, limit: int = 0) -> list[int]:
        """``encode(text)`` for rendered prompts; implementations may cache whole turns, and may stop
        early once they have more than ``limit`` ids (0: no limit), since such a prompt is refused anyway."""
        return self.encode(text)

    def max_token_chars(self) -> int:
        """The most characters one token can stand for: a text longer than ``n`` times this certainly
        has more than ``n`` tokens, without tokenising it. The default suits BPE vocabularies."""
        return 128

    def prepare(self) -> None:
        """Make now the checks and tables a first call would otherwise wait for (the proxy calls this
        before it listens, so a fresh shard's first call costs what any other does)."""


GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
"""The split tokenizers' ``ByteLevel`` pre-tokenizer makes with ``use_regex`` (GPT-2's)."""


def _tiktoken_pattern(config: dict[str, Any]) -> str | None:
    """The regex tiktoken must split with to match a tokenizer.json's pre-tokenizer, or None when it cannot."""
    pre = config.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel":
        return GPT2_SPLIT if pre.get("use_regex", True) and not pre.get("add_prefix_space") else None
    steps = (pre.get("pretokenizers") or []) if pre.get("type") == "Sequence" else []
    if len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel" \
            and not steps[1].get("use_regex", True) and not steps[1].get("add_prefix_space") \
            and steps[0].get("behavior") == "Isolated" and not steps[0].get("invert") \
            and "Regex" in (steps[0].get("pattern") or {}):
        return str(steps[0]["pattern"]["Regex"])
    return None


def _tiktoken_samples() -> list[str]:
    """Texts mixing what BPE splits on: letters, digits, marks, spaces and newlines in runs, other scripts."""
    import random

    pick = random.Random(0)
    alphabet = "aeiou rst Ndx09 7,.;:'\"!?()[]{}<>-_=+*/\\|@#$%^&~`\n\t  \u00e9\u00df\u4e2d\u0444\U0001f600\u200b"
    texts = ["".join(pick.choice(alphabet) for _ in range(pick.randrange(1, 200))) for _ in range(300)]
    return texts + ["def f(x):\n    return x  # 1234567\n\n\n", "  leading", "trailing  ", "\n\n\n", "   \n  \n"]


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2 byte-level BPE: the printable character that stands for each byte, inverted."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


class HFChatTemplate(ChatTemplate):
    """A Hugging Face tokenizer with a chat template (tokenizers fast backend)."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            from openforgerl.errors import UserError

            raise UserError("the tokenizer has no chat template",
                            fix="load a tokenizer whose chat template supports tools (Hermes style)")
        # encode_batch releases the GIL; one text at a time needs no thread pool, and a pool that was used
        # makes tokenizers print a warning into every child process forked later (unless the user chose).
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token_id
        ids = {eos} if isinstance(eos, int) else set(eos or [])
        self._stop_ids = frozenset(ids)
        self._end_of_turn = tokenizer.eos_token or ""
        self._bytes: list[bytes] | None = None
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self._turns: Bounded[str, list[int]] = Bounded(TURN_CACHE_ENTRIES, TURN_CACHE_IDS)  # turn text -> ids
        self._piecewise: bool | None = None
        self._max_chars = 0
        self._incremental: bool | None = None
        self._thinking_in_full = False  # set by ``_check_incremental``: see ``THINKING_SAMPLES``
        self._thinking_after_query = False  # ... and whether ``_after_query`` renders what a call adds to them
        self._query_text = ""
        self._renders = 0  # incremental renders made, for ``_verified``
        self._texts: Bounded[bytes, str] = Bounded(TEXT_CACHE_ENTRIES, TEXT_CACHE_CHARS)  # a message run -> text
        self._shapes: Bounded[bytes, tuple[str | int, ...]] = Bounded(SHAPE_CACHE_ENTRIES, SHAPE_CACHE_ENTRIES * 64)
        self._slots: bool | None = None
        """Whether runs render through their shapes (checked per template on ``slots.sample_runs``)."""
        self._anchor_text = self._generation_prompt = ""
        self._direct_decode: bool | None = None
        self._text_arguments: bool | None = None
        """Whether calls' arguments render as JSON text (``_check_text_arguments``), not as objects."""
        self._fast_encode: bool | None = None
        self._tiktoken: Any = None
        """(tiktoken's BPE, a pattern of the characters it cannot take) when it gives the tokenizer's ids
        (checked), else False."""

    def render(self, messages, tools, add_generation_prompt):
        if self._incremental is None:  # racing threads compute the same answer
            self._incremental = self._check_incremental()
        # A conversation ending in an answer (one to go on) renders in full: templates often write the last message
        # their own way (ChatML's leaves it open), and agent loops do not send one.
        if not self._incremental or not messages or messages[0].get("role") != "system" \
                or messages[-1].get("role") == "assistant" or (self._thinking_in_full and thinking(messages)):
            return self.full_render(messages, tools, add_generation_prompt)
        try:
            text = self._by_message(messages, tools, add_generation_prompt)
        except (_NotIncremental, TypeError):  # a message orjson cannot write, or one the anchor trick cannot render
            return self.full_render(messages, tools, add_generation_prompt)
        return self._verified(text, messages, tools, add_generation_prompt)

    def _verified(self, text: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                  gen: bool, after_query: str | None = None) -> str:
        """``text``, an incremental render; on the renders ``VERIFY_FIRST`` and ``VERIFY_EVERY`` pick, compared with
        the full render, which it gives instead when they differ. From then on every render is full, unless the
        runs rendered afresh give it: then a cached text was stale (a template that writes today's date).
        ``after_query``: ``text`` ends with that render of ``_after_query``; when it differs, only that way is
        given up (unless the full render ends with it too: then the kept prompt was stale)."""
        self._renders += 1  # (threads racing here may skip or repeat a check: no harm)
        if not CHECK_RENDER and self._renders > VERIFY_FIRST and self._renders % VERIFY_EVERY:
            return text
        full = self.full_render(messages, tools, gen)
        if text == full:
            return text
        at = next((i for i, (a, b) in enumerate(zip(text, full, strict=False)) if a != b), min(len(text), len(full)))
        if CHECK_RENDER:
            raise AssertionError(f"incremental render differs from the full render at character {at}")
        if after_query is not None:
            if self._thinking_after_query and not full.endswith(after_query):
                self._thinking_after_query = False
                log.warning("the chat template renders what a call adds to a conversation holding reasoning "
                            "otherwise than after a user message (first difference at character %d); such "
                            "conversations are rendered in full from now on", at)
            return full
        self._texts.clear()  # a text may be stale (a template that writes today's date): do the runs render so now?
        try:
            stale = self._by_message(messages, tools, gen) == full
        except (_NotIncremental, TypeError):
            stale = False
        if self._incremental and not stale:
            self._incremental = False
            log.warning("the chat template renders a conversation otherwise than message by message (first "
                        "difference at character %d: %r, rendered in full: %r); every prompt is rendered in full "
                        "from now on (slower: the template's Jinja on the whole history each call)",
                        at, text[max(at - 20, 0):at + 20], full[max(at - 20, 0):at + 20])
        return full

    def full_render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                    add_generation_prompt: bool) -> str:
        if self._text_arguments is None:  # racing threads compute the same answer
            self._text_arguments = self._check_text_arguments()
        if self._text_arguments:
            messages = arguments_as_text(messages)
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False)

    def _check_text_arguments(self) -> bool:
        """Whether the template takes a call's arguments only as JSON text: it fails on an object (transformers'
        convention, which the proxy follows) and renders the text, as a template that concatenates them does
        (DeepSeek V3.1's own: ``... + tool['function']['arguments'] + ...``)."""
        call = {"id": "forge0001", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
        sample: list[dict[str, Any]] = [{"role": "user", "content": "hi"},
                                        {"role": "assistant", "content": "", "tool_calls": [call]}]
        try:
            self.tokenizer.apply_chat_template(sample, tokenize=False)
            return False
        except Exception:  # noqa: BLE001  (any failure: does the text form render?)
            try:
                self.tokenizer.apply_chat_template(arguments_as_text(sample), tokenize=False)
            except Exception:  # noqa: BLE001  (it fails either way: not about arguments)
                return False
        log.info("the chat template takes tool-call arguments as JSON text, not objects: rendering them so")
        return True

    def _by_message(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, gen: bool) -> str:
        """The template's text assembled from cached texts: the system turn (with the tools) rendered alone,
        then each run of same-role messages as the text it adds after an anchor system turn, then the
        generation prompt. Valid only for templates ``_check_incremental`` accepted."""
        head_key = orjson.dumps([messages[0], tools or None])
        head = self._cached(head_key, lambda: self.full_render(messages[:1], tools, False))
        return head + self._runs(messages, 1) + (self._generation_prompt if gen else "")

    def _runs(self, messages: list[dict[str, Any]], start: int) -> str:
        """The text the runs of same-role messages from ``start`` on add (``start`` begins a run)."""
        parts = []
        while start < len(messages):  # a run of same-role messages renders together (templates merge tool results)
            end = start + 1
            while end < len(messages) and messages[end].get("role") == messages[start].get("role"):
                end += 1
            run = messages[start:end]
            key = orjson.dumps(run)  # keys in their order: a template may write an object (arguments) as it is
            parts.append(self._cached(key, functools.partial(self._new_run_text, run)))
            start = end
        return "".join(parts)

    def render_after(self, text, messages, start, tools):
        if not self._incremental or not 0 < start < len(messages) or messages[0].get("role") != "system" \
                or messages[start - 1].get("role") == messages[start].get("role") \
                or messages[-1].get("role") == "assistant" or not text.endswith(self._generation_prompt):
            return None
        kept = text[:len(text) - len(self._generation_prompt)]
        try:
            if not (self._thinking_in_full and thinking(messages)):
                return self._verified(kept + self._runs(messages, start) + self._generation_prompt, messages, tools,
                                      True)
            if self._thinking_after_query and all(m.get("role") != "user" for m in messages[start:]):
                after = self._after_query(messages[start:])
                return self._verified(kept + after, messages, tools, True, after_query=after)
        except (_NotIncremental, TypeError):
            pass
        return None

    def _after_query(self, new: list[dict[str, Any]]) -> str:
        """The text messages that follow the last user message add to their conversation, with the generation
        prompt: rendered together after an anchor system turn and a user message (as in their conversation, the
        last of them is the last message). For templates that show an answer's reasoning only after the last user
        message, which ``_check_incremental`` found to render so."""
        text = self.full_render([ANCHOR, QUERY, *new], None, True)
        if not text.startswith(self._query_text):
            raise _NotIncremental
        return text[len(self._query_text):]

    def _after_query_agrees(self) -> bool:
        """Whether ``render_after`` through ``_after_query`` gives the full render on ``THINKING_SAMPLES``, at every
        point it would be used (a change of role, no user message after it)."""
        self._query_text = self.full_render([ANCHOR, QUERY], None, False)
        checked = 0
        for sample, tools in THINKING_SAMPLES:
            for start in range(1, len(sample)):
                if sample[start - 1]["role"] == sample[start]["role"] or \
                        any(m["role"] == "user" for m in sample[start:]):
                    continue
                kept = self.full_render(sample[:start], tools, True)
                if not kept.endswith(self._generation_prompt) or kept[:len(kept) - len(self._generation_prompt)] \
                        + self._after_query(sample[start:]) != self.full_render(sample, tools, True):
                    return False
                checked += 1
        return checked > 0

    def _run_text(self, run: list[dict[str, Any]]) -> str:
        text = self.full_render([ANCHOR, *run], None, False)
        if not text.startswith(self._anchor_text):
            raise _NotIncremental
        return text[len(self._anchor_text):]

    def _new_run_text(self, run: list[dict[str, Any]]) -> str:
        """A run's text, not cached: from its shape's pieces when the template allows, else rendered."""
        if self._slots is None and self._incremental:  # racing threads compute the same answer
            self._slots = self._check_slots()
        if self._slots:
            shaped = slots.shape(run)
            if shaped is not None:
                key = orjson.dumps(shaped[0])
                parts = self._shapes.get_or_make(key, functools.partial(slots.pieces, shaped[0], self._run_text))
                if parts and slots.holds(parts, shaped[1]):
                    return slots.fill(parts, shaped[1])
        return self._run_text(run)

    def _check_slots(self) -> bool:
        """Whether runs may render through their shapes: every sample run the template renders through its shape
        (``slots.pieces`` did not refuse it) must give the text it renders for the run itself."""
        if not USE_SLOTS:
            return False
        try:
            for run in slots.sample_runs():
                shaped = slots.shape(run)
                if shaped is None:
                    continue
                parts = slots.pieces(shaped[0], self._run_text)
                if parts and slots.holds(parts, shaped[1]) and slots.fill(parts, shaped[1]) != self._run_text(run):
                    return False
            return True
        except Exception:  # noqa: BLE001  (a template that cannot render the samples: no shapes)
            return False

    def _cached(self, key: bytes, make: Callable[[], str]) -> str:
        return self._texts.get_or_make(key, make)

    def _check_incremental(self) -> bool:
        """Whether this template renders each run of same-role messages independently of its neighbours (so
        texts can be cached per run): checked on conversations with every role, tool calls, consecutive tool
        results and content-less turns, with and without tools. A template that fails renders in full; one that
        fails only on answers holding their reasoning (``THINKING_SAMPLES``) renders in full the conversations
        that have such an answer, but for what a call adds after a kept prompt (``_after_query``), if it can."""
        try:
            self._anchor_text = self.full_render([ANCHOR], None, False)
            self._generation_prompt = self.full_render([ANCHOR], None, True)[len(self._anchor_text):]
            if not self.full_render([ANCHOR], None, True).startswith(self._anchor_text):
                return False
            for messages, tools in INCREMENTAL_SAMPLES:
                for gen in (False, True):
                    if self._by_message(messages, tools, gen) != self.full_render(messages, tools, gen):
                        return False
            self._thinking_in_full = any(self._by_message(sample, tools, gen) != self.full_render(sample, tools, gen)
                                         for sample, tools in THINKING_SAMPLES for gen in (False, True))
            if self._thinking_in_full:
                try:
                    self._thinking_after_query = self._after_query_agrees()
                except Exception:  # noqa: BLE001  (such conversations then render in full)
                    self._thinking_after_query = False
            return True
        except Exception:  # noqa: BLE001  (a template that cannot render the samples: render in full)
            return False
        finally:
            self._texts.clear()

    def encode(self, text):
        if self._backend is None:
            return self.tokenizer.encode(text, add_special_tokens=False)
        if self._tiktoken is None:  # racing threads compute the same answer
            self._tiktoken = self._make_tiktoken()
        if self._tiktoken and not self._tiktoken[1].search(text):  # the same BPE, ~3x faster, the GIL released
            try:
                return self._tiktoken[0].encode(text, allowed_special="all")
            except BaseException as exc:  # a Rust panic (pyo3's PanicException): tokenizers takes over
                if type(exc).__name__ != "PanicException":
                    raise
        if self._fast_encode is None:
            self._fast_encode = self._check_fast_encode()
        if self._fast_encode:  # no offsets or word ids to build: 1.2-2x faster here; the GIL released
            return self._backend.encode_batch_fast([text], add_special_tokens=False)[0].ids
        if len(text) >= GIL_FREE_CHARS:  # same ids; tokenizers' encode would hold the GIL throughout
            return self._backend.encode_batch([text], add_special_tokens=False)[0].ids
        return self._backend.encode(text, add_special_tokens=False).ids

    def _make_tiktoken(self) -> Any:
        """tiktoken's encoder for this tokenizer when it is a byte-level BPE that tiktoken runs the same way (no
        normalizer; GPT-2's split or one ``Split`` regex before a byte-level step; added tokens matched as they
        are) and gives the tokenizer's own ids on ``ENCODE_SAMPLES`` and a spread of generated texts; else False
        (tokenizers it is). Tokenising a tool output is most of what a real extending call costs the proxy."""
        if os.environ.get("FORGE_PROXY_TIKTOKEN", "1") == "0" or self._backend is None:
            return False
        try:
            import tiktoken
        except ImportError:
            return False
        try:
            config = orjson.loads(self._backend.to_str())
            pattern = _tiktoken_pattern(config)
            model = config["model"]
            if pattern is None or config.get("normalizer") or model.get("type") != "BPE" or model.get("dropout") \
                    or model.get("byte_fallback") or model.get("continuing_subword_prefix") \
                    or model.get("end_of_word_suffix"):
                return False
            added = config.get("added_tokens") or []
            if any(t.get("lstrip") or t.get("rstrip") or t.get("single_word") for t in added):
                return False
            specials = {t["content"]: t["id"] for t in added}
            alphabet = byte_level_alphabet()
            ranks = {bytes(alphabet[c] for c in token): i for token, i in model["vocab"].items()
                     if token not in specials}
            # a byte with no token of its own (some vocabularies leave out control characters): tokenizers drops
            # it, tiktoken cannot go on; texts with such a character (or a lone surrogate) go to tokenizers
            unknown = "".join(f"\\x{b:02x}" for b in range(128) if bytes([b]) not in ranks)
            unsafe = re.compile(f"[{unknown}\\ud800-\\udfff]")
            encoding = tiktoken.Encoding(f"forge-{id(self)}", pat_str=pattern, mergeable_ranks=ranks,
                                         special_tokens=specials)
            samples = [text for text in (*ENCODE_SAMPLES, *_tiktoken_samples(), *(f"a{t} b" for t in specials))
                       if not unsafe.search(text)]
            if self._gives_encode_ids(lambda text: encoding.encode(text, allowed_special="all"), samples):
                return encoding, unsafe
        except Exception:  # noqa: BLE001  (a vocabulary tiktoken cannot take: tokenizers it is)
            pass
        return False

    def _check_fast_encode(self) -> bool:
        """Whether the backend has ``encode_batch_fast`` (tokenizers >= 0.21) and it gives ``encode``'s ids."""
        backend = self._backend
        fast = getattr(backend, "encode_batch_fast", None)
        if backend is None or fast is None:
            return False
        try:
            return self._gives_encode_ids(lambda text: fast([text], add_special_tokens=False)[0].ids,
                                          [*ENCODE_SAMPLES, f"a{self._end_of_turn}\nb"])
        except Exception:  # noqa: BLE001  (a backend that cannot: encode it is)
            return False

    def _gives_encode_ids(self, encode: Callable[[str], list[int]], samples: list[str]) -> bool:
        """Whether ``encode`` gives the backend's own ``encode`` ids on every sample."""
        assert self._backend is not None
        return all(encode(text) == self._backend.encode(text, add_special_tokens=False).ids for text in samples)

    def encode_prompt(self, text, limit=0):
        """Encode turn by turn, reusing the ids of turns seen before (system prompts, tool lists), and
        stop once there are more than ``limit`` ids.

        Splitting right after each end-of-turn special token gives the same ids as encoding the
        whole text (special tokens are cut out before BPE runs); checked once per template.
        """
        if self._piecewise is None:  # racing threads compute the same answer
            self._piecewise = self._check_piecewise()
        if not self._piecewise:
            return self.encode(text)
        return self._pieces(text, limit)

    def _pieces(self, text: str, limit: int = 0) -> list[int]:
        eot, start = self._end_of_turn, 0
        ids: list[int] = []
        while start < len(text) and not (limit and len(ids) > limit):
            end = text.find(eot, start)
            end = len(text) if end < 0 else end + len(eot)
            ids += self._turn_ids(text[start:end])
            start = end
        return ids

    def _turn_ids(self, piece: str) -> list[int]:
        return self._turns.get_or_make(piece, lambda: self.encode(piece))  # short turns too: each encode costs

    def _check_piecewise(self) -> bool:
        if not self._end_of_turn:
            return False
        sample = [{"role": "system", "content": "Check: é 😀 <tools> {\"a\": 1}"},
                  {"role": "user", "content": " leading space\n\n"}, {"role": "assistant", "content": "x  "},
                  {"role": "user", "content": "y"}]
        text = self.render(sample, None, True)
        return self._pieces(text) == self.encode(text)

    def prepare(self):
        if self._incremental is None:
            self._incremental = self._check_incremental()
        if self._slots is None and self._incremental:
            self._slots = self._check_slots()
        if self._piecewise is None:
            self._piecewise = self._check_piecewise()
        self.max_token_chars()
        self.token_bytes()
        if self._direct_decode is None:
            self._direct_decode = self._check_direct_decode()
        if self._tiktoken is None:
            self._tiktoken = self._make_tiktoken()
        if self._fast_encode is None:
            self._fast_encode = self._check_fast_encode()

    def max_token_chars(self):
        """The longest token in the vocabulary, special ones included (byte-level vocabularies spell each
        byte as one character, so this is its length in bytes: at least its length in characters)."""
        if not self._max_chars:
            self._max_chars = max(map(len, self.tokenizer.get_vocab()), default=1)
        return self._max_chars

    def decode(self, ids, skip_special=True):
        if self._direct_decode is None:  # racing threads compute the same answer
            self._direct_decode = self._check_direct_decode()
        if self._direct_decode and self._backend is not None:
            return self._backend.decode(ids, skip_special_tokens=skip_special)
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special)

    def _check_direct_decode(self) -> bool:
        """Whether the tokenizers backend decodes as the tokenizer does: transformers' ``decode`` wraps it in
        ~2.5 us of Python per call (list conversion, then a clean-up of spaces before punctuation that most
        chat tokenizers leave off) and the proxy decodes every answer twice. Checked on a spread of ids, the
        special ones and a text the clean-up would change (``" ."``, ``" 's"``), both with and without specials."""
        if self._backend is None:
            return False
        sample = list(range(0, len(self.tokenizer), 97)) + sorted(getattr(self.tokenizer, "all_special_ids", []))
        spaced = self.tokenizer.encode("Hello , world . It ' s ok ? Yes ! I 'm (sure) n't", add_special_tokens=False)
        texts = [sample, spaced]
        try:
            return all(self._backend.decode(ids, skip_special_tokens=skip) ==
                       self.tokenizer.decode(ids, skip_special_tokens=skip) for ids in texts for skip in (True, False))
        except Exception:  # noqa: BLE001  (a backend that cannot decode these: the tokenizer's own decode it is)
            return False

    @property
    def stop_ids(self):
        return self._stop_ids

    @property
    def end_of_turn(self):
        return self._end_of_turn

    def token_bytes(self):
        if self._bytes is None:
            self._bytes = self._byte_table() or []
        return self._bytes or None

    def _byte_table(self) -> list[bytes] | None:
        """Per-id bytes for byte-level BPE tokenizers, checked against ``decode`` on a sample."""
        from tokenizers import decoders

        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None or not isinstance(backend.decoder, decoders.ByteLevel):
            return None
        alphabet = byte_level_alphabet()
        added = getattr(self.tokenizer, "added_tokens_decoder", {})
        table = []
        for i, token in enumerate(self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))):
            if i in added:
                table.append(b"" if added[i].special else added[i].content.encode())
            elif token is None or any(c not in alphabet for c in token):
                return None
            else:
                table.append(bytes(alphabet[c] for c in token))
        sample = list(range(0, len(table), 97))
        if b"".join(table[i] for i in sample).decode("utf-8", "replace") != self.decode(sample):
            return None
        return table


class IncrementalDecoder:
    """Turns a stream of token ids into text deltas without splitting multi-byte characters.

    Byte-level tokenizers decode token by token through a UTF-8 incremental decoder (constant
    work per token); others decode a short sliding window, as vLLM's detokenizer does.
    """

    def __init__(self, template: ChatTemplate, kept: Mapping[int, str] | None = None) -> None:
        self.template = template
        self.ids: list[int] = []
        self._kept = kept or {}  # special ids written as their text (``ChatTemplate.special_ids``)
        self._table = template.token_bytes()
        if self._table is not None and self._kept:
            self._table = _table_keeping(template, self._table, self._kept)
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._prefix = 0  # window start: ids before it are already emitted and stable
        self._read = 0  # ids up to here are emitted

    def push(self, ids: list[int]) -> str:
        if self._table is None and self._kept and any(i in self._kept for i in ids):
            parts, start = [], 0
            for at, i in enumerate(ids):
                if i in self._kept:  # what comes before it is out whole; the marker's text is its own
                    parts += [self._push(ids[start:at]), self.flush(), self._kept[i]]
                    self.ids.append(i)
                    self._prefix = self._read = len(self.ids)
                    start = at + 1
            parts.append(self._push(ids[start:]))
            return "".join(parts)
        return self._push(ids)

    def _push(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        if self._table is not None:
            return self._utf8.decode(b"".join([self._table[i] for i in ids]))
        prefix_text = self.template.decode(self.ids[self._prefix:self._read])
        full_text = self.template.decode(self.ids[self._prefix:])
        if full_text.endswith("\ufffd") or len(full_text) < len(prefix_text):
            return ""  # an incomplete UTF-8 sequence: wait for the next token
        self._prefix, self._read = self._read, len(self.ids)
        return full_text[len(prefix_text):]

    def flush(self) -> str:
        """Whatever is still held back at the end of the stream."""
        if self._table is not None:
            return self._utf8.decode(b"", final=True)
        prefix_text = self.template.decode(self.ids[self._prefix:self._read])
        full_text = self.template.decode(self.ids[self._prefix:])
        self._prefix = self._read = len(self.ids)
        return full_text[len(prefix_text):]


def arguments_as_text(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every call's arguments as JSON text (copies of the messages that change)."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls and any(not isinstance(c.get("function", {}).get("arguments"), str) for c in calls):
            message = {**message, "tool_calls": [
                c if isinstance(c.get("function", {}).get("arguments"), str) else
                {**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"],
                                                                            ensure_ascii=False)}}
                for c in calls]}
        out.append(message)
    return out


_kept_tables: weakref.WeakKeyDictionary[ChatTemplate, dict[frozenset[tuple[int, str]], list[bytes]]] = \
    weakref.WeakKeyDictionary()


def _table_keeping(template: ChatTemplate, table: list[bytes], kept: Mapping[int, str]) -> list[bytes]:
    """``table`` with the ids of ``kept`` decoding to their text; made once per template and markers."""
    key = frozenset(kept.items())
    try:
        tables = _kept_tables.setdefault(template, {})
    except TypeError:  # a template that cannot be weakly referenced: made for each decoder
        tables = {}
    if key not in tables:
        patched = list(table)
        for i, text in kept.items():
            patched[i] = text.encode()
        tables[key] = patched
    return tables[key]


def load_chat_template(model: str, tokenizer_dir: str | None = None) -> ChatTemplate:
    """The policy's template: from a tokenizer directory, or from the model registry by name."""
    from openforgerl.errors import UserError

    if tokenizer_dir:
        try:
            import transformers  # noqa: F401

            from openforgerl.models.registry import hf_tokenizer
        except ImportError as exc:
            raise UserError("loading a tokenizer needs transformers",
                            fix='pip install "openforgerl[model]"') from exc
        template = HFChatTemplate(hf_tokenizer(tokenizer_dir))
        warn_without_tools(template, tokenizer_dir)
        return template
    try:
        from openforgerl.models.registry import load_tokenizer
    except ImportError as exc:
        raise UserError(f"no model registry to load the tokenizer of {model!r}",
                        fix="pass --tokenizer DIR (a Hugging Face tokenizer directory)") from exc
    return HFChatTemplate(load_tokenizer(model))


def warn_without_tools(template: ChatTemplate, where: str) -> None:
    """Say so when a chat template drops tools: the harness's tools would silently vanish."""
    probe = [{"type": "function", "function": {"name": "forge_probe_tool", "parameters": {"type": "object"}}}]
    if "forge_probe_tool" not in template.render([{"role": "user", "content": "x"}], probe, True):
        from openforgerl.log import get_logger

        get_logger(__name__).warning("the chat template in %s ignores tools: harness tools will not reach the "
                                     "model (use the model's tool-capable template, e.g. --model smollm2)", where)
