"""The policy's chat template as the proxy sees it: messages + tools -> text -> token ids, and back.

Key invariant: ``render`` is *concatenative* for the templates we serve — the text of a
conversation is a prefix of the text of any conversation that extends it. The prefix logic in
``lineage.py`` relies on that and falls back to a new segment when a template breaks it.
Render and encode are called from worker threads (several rollouts at once), so templates keep
no unguarded mutable state.
"""

from __future__ import annotations

import codecs
import os
import threading
from abc import ABC, abstractmethod
from typing import Any

GIL_FREE_CHARS = 4096
"""Longer texts are tokenised with the GIL released, so the event loop keeps running meanwhile."""


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

    def encode_prompt(self, text: str, limit: int = 0) -> list[int]:
        """``encode(text)`` for rendered prompts; implementations may cache whole turns, and may stop
        early once they have more than ``limit`` ids (0: no limit), since such a prompt is refused anyway."""
        return self.encode(text)

    def max_token_chars(self) -> int:
        """The most characters one token can stand for: a text longer than ``n`` times this certainly
        has more than ``n`` tokens, without tokenising it. The default suits BPE vocabularies."""
        return 128


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
        self._turns: dict[str, list[int]] = {}  # rendered turn text -> ids (bounded, see encode_prompt)
        self._turns_lock = threading.Lock()
        self._piecewise: bool | None = None
        self._max_chars = 0

    def render(self, messages, tools, add_generation_prompt):
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False)

    def encode(self, text):
        if self._backend is None:
            return self.tokenizer.encode(text, add_special_tokens=False)
        if len(text) >= GIL_FREE_CHARS:  # same ids; tokenizers' encode would hold the GIL throughout
            return self._backend.encode_batch([text], add_special_tokens=False)[0].ids
        return self._backend.encode(text, add_special_tokens=False).ids

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
        with self._turns_lock:
            ids = self._turns.get(piece)
        if ids is None:
            ids = self.encode(piece)
            if len(piece) > 200:  # short pieces are cheap to encode; keep the cache for big turns
                with self._turns_lock:
                    if len(self._turns) >= 1024:
                        self._turns.pop(next(iter(self._turns)))
                    self._turns[piece] = ids
        return ids

    def _check_piecewise(self) -> bool:
        if not self._end_of_turn:
            return False
        sample = [{"role": "system", "content": "Check: é 😀 <tools> {\"a\": 1}"},
                  {"role": "user", "content": " leading space\n\n"}, {"role": "assistant", "content": "x  "},
                  {"role": "user", "content": "y"}]
        text = self.render(sample, None, True)
        return self._pieces(text) == self.encode(text)

    def max_token_chars(self):
        """The longest token in the vocabulary, special ones included (byte-level vocabularies spell each
        byte as one character, so this is its length in bytes: at least its length in characters)."""
        if not self._max_chars:
            self._max_chars = max(map(len, self.tokenizer.get_vocab()), default=1)
        return self._max_chars

    def decode(self, ids, skip_special=True):
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special)

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

    def __init__(self, template: ChatTemplate) -> None:
        self.template = template
        self.ids: list[int] = []
        self._table = template.token_bytes()
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._prefix = 0  # window start: ids before it are already emitted and stable
        self._read = 0  # ids up to here are emitted

    def push(self, ids: list[int]) -> str:
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


def load_chat_template(model: str, tokenizer_dir: str | None = None) -> ChatTemplate:
    """The policy's template: from a tokenizer directory, or from the model registry by name."""
    from openforgerl.errors import UserError

    if tokenizer_dir:
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise UserError("loading a tokenizer needs transformers",
                            fix='pip install "openforgerl[model]"') from exc
        template = HFChatTemplate(AutoTokenizer.from_pretrained(tokenizer_dir))
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
