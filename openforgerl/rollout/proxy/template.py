"""The policy's chat template as the proxy sees it: messages + tools -> text -> token ids, and back.

Key invariant: ``render`` is *concatenative* for the templates we serve — the text of a
conversation is a prefix of the text of any conversation that extends it. The prefix logic in
``lineage.py`` relies on that and falls back to a new segment when a template breaks it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


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


class HFChatTemplate(ChatTemplate):
    """A Hugging Face tokenizer with a chat template (tokenizers fast backend)."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            from openforgerl.errors import UserError

            raise UserError("the tokenizer has no chat template",
                            fix="load a tokenizer whose chat template supports tools (Hermes style)")
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token_id
        ids = {eos} if isinstance(eos, int) else set(eos or [])
        self._stop_ids = frozenset(ids)
        self._end_of_turn = tokenizer.eos_token or ""

    def render(self, messages, tools, add_generation_prompt):
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False)

    def encode(self, text):
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids, skip_special=True):
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special)

    @property
    def stop_ids(self):
        return self._stop_ids

    @property
    def end_of_turn(self):
        return self._end_of_turn


class IncrementalDecoder:
    """Turns a stream of token ids into text deltas without splitting multi-byte characters.

    Decodes a short sliding window rather than the whole response each time, so streaming a
    long answer stays linear.
    """

    def __init__(self, template: ChatTemplate) -> None:
        self.template = template
        self.ids: list[int] = []
        self._prefix = 0  # window start: ids before it are already emitted and stable
        self._read = 0  # ids up to here are emitted

    def push(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        prefix_text = self.template.decode(self.ids[self._prefix:self._read])
        full_text = self.template.decode(self.ids[self._prefix:])
        if full_text.endswith("\ufffd") or len(full_text) < len(prefix_text):
            return ""  # an incomplete UTF-8 sequence: wait for the next token
        self._prefix, self._read = self._read, len(self.ids)
        return full_text[len(prefix_text):]

    def flush(self) -> str:
        """Whatever is still held back at the end of the stream."""
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
        return HFChatTemplate(AutoTokenizer.from_pretrained(tokenizer_dir))
    try:
        from openforgerl.models.registry import load_tokenizer
    except ImportError as exc:
        raise UserError(f"no model registry to load the tokenizer of {model!r}",
                        fix="pass --tokenizer DIR (a Hugging Face tokenizer directory)") from exc
    return HFChatTemplate(load_tokenizer(model))
