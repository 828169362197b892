"""What the tool-parser tests share: argument values of every JSON type, and the policy's tokenizer under a chat
template written in a parser's syntax."""

from __future__ import annotations

import copy

from hypothesis import strategies as st

from openforgerl.rollout.proxy.template import HFChatTemplate

VALUES = st.one_of(st.text(alphabet=st.sampled_from(list("ab <>/=\n{}\"é")), max_size=12),
                   st.integers(-5, 10**6), st.booleans(), st.none(), st.floats(-10, 10, allow_nan=False),
                   st.lists(st.integers(0, 3), max_size=3), st.dictionaries(st.sampled_from("xyz"), st.integers()))
TYPE_OF = {str: "string", int: "integer", bool: "boolean", type(None): "null", float: "number", list: "array",
           dict: "object"}


def under(policy: HFChatTemplate, chat_template: str) -> HFChatTemplate:
    """The policy's tokenizer with ``chat_template`` instead of its own."""
    tokenizer = copy.deepcopy(policy.tokenizer)
    tokenizer.chat_template = chat_template
    return HFChatTemplate(tokenizer)
