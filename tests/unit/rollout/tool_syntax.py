"""What the tool-parser tests share: argument values of every JSON type, and the policy's tokenizer under a chat
template written in a parser's syntax."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import strategies as st

from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.rollout.proxy.template import HFChatTemplate
from openforgerl.testing.proxy import InProcessProxy, tool_loop

VALUES = st.one_of(st.text(alphabet=st.sampled_from(list("ab <>/=\n{}\"é")), max_size=12),
                   st.integers(-5, 10**6), st.booleans(), st.none(), st.floats(-10, 10, allow_nan=False),
                   st.lists(st.integers(0, 3), max_size=3), st.dictionaries(st.sampled_from("xyz"), st.integers()))
TYPE_OF = {str: "string", int: "integer", bool: "boolean", type(None): "null", float: "number", list: "array",
           dict: "object"}


def under(policy: HFChatTemplate, chat_template: str, markers: tuple[str, ...] = (),
          special: bool = True) -> HFChatTemplate:
    """The policy's tokenizer with ``chat_template`` instead of its own, and ``markers`` as tokens of their own
    (``special``: ones decoding leaves out, as the families that spell calls in them hold them)."""
    tokenizer = copy.deepcopy(policy.tokenizer)
    if markers:
        if special:
            tokenizer.add_special_tokens({"additional_special_tokens": list(markers)})
        else:
            tokenizer.add_tokens(list(markers))
    tokenizer.chat_template = chat_template
    return HFChatTemplate(tokenizer)


LOOP_TURNS = [ScriptTurn(tool_calls=[{"name": "edit", "arguments": {"path": "a.py", "line": 3}}]),
              ScriptTurn(tool_calls=[{"name": "edit", "arguments": {"path": "b.py", "line": 1}},
                                     {"name": "ls", "arguments": {}}]),
              ScriptTurn(text="done")]
LOOP_CALLS = [[("edit", {"path": "a.py", "line": 3})], [("edit", {"path": "b.py", "line": 1}), ("ls", {})], []]
"""What the harness gets from ``LOOP_TURNS``: each answer's calls, (name, arguments)."""


def harness_loop(template: HFChatTemplate, tools: list[dict[str, Any]],
                 turns: list[ScriptTurn] = LOOP_TURNS) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A harness's loop through a proxy left at ``proxy.tool_parser = auto``, the policy answering ``turns`` under
    ``template``: the answers the harness got, and the rollout's trajectory."""
    messages, trajectory = tool_loop(InProcessProxy(turns, template=template), tools, len(turns))
    return [m for m in messages if m["role"] == "assistant"], trajectory


def calls_of(answer: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in answer.get("tool_calls") or []]


# A template that writes calls as Qwen3-Coder's does (its own wording, the same layout): each parameter on its own
# lines, strings as they are, objects and lists as JSON, other values through Jinja's ``string``.
CODER_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}{{ '<|im_start|>system\\n' + m.content }}"
    "{%- if tools -%}{{ '\\n\\n<tools>' }}{%- for t in tools -%}{{ '\\n' + (t | tojson) }}{%- endfor -%}"
    "{{ '\\n</tools>' }}{%- endif -%}{{ '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' -%}{{ '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for c in m.tool_calls or [] -%}{%- set f = c.function -%}"
    "{%- if m.content or not loop.first -%}{{ '\\n' }}{%- endif -%}"
    "{{ '<tool_call>\\n<function=' + f.name + '>\\n' }}"
    "{%- for k, v in f.arguments | items -%}{{ '<parameter=' + k + '>\\n' }}"
    "{%- if v is mapping or (v is sequence and v is not string) -%}{{ v | tojson }}{%- else -%}{{ v | string }}"
    "{%- endif -%}{{ '\\n</parameter>\\n' }}{%- endfor -%}{{ '</function>\\n</tool_call>' }}"
    "{%- endfor -%}{{ '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{ '<|im_start|>user\\n' }}{%- endif -%}"
    "{{ '<tool_response>\\n' + m.content + '\\n</tool_response>\\n' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{ '<|im_end|>\\n' }}{%- endif -%}"
    "{%- else -%}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")


# A template that writes calls as GLM-4.5's does (its own wording, the same layout): the name after the opening tag,
# then each key and value on their lines, strings as they are and everything else as JSON. Turns end with the policy
# tokenizer's end of turn (SmolLM2's), which the scripted engine samples last.
GLM_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}{{ '<|im_start|>system\\n' + m.content }}"
    "{%- if tools -%}{%- for t in tools -%}{{ '\\n' + (t | tojson) }}{%- endfor -%}{%- endif -%}{{ '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' -%}{{ '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for c in m.tool_calls or [] -%}{%- set f = c.function -%}"
    "{%- if m.content or not loop.first -%}{{ '\\n' }}{%- endif -%}"
    "{{ '<tool_call>' + f.name + '\\n' }}"
    "{%- for k, v in f.arguments | items -%}{{ '<arg_key>' + k + '</arg_key>\\n<arg_value>' }}"
    "{%- if v is string -%}{{ v }}{%- else -%}{{ v | tojson }}{%- endif -%}{{ '</arg_value>\\n' }}{%- endfor -%}"
    "{{ '</tool_call>' }}{%- endfor -%}{{ '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' -%}"
    "{{ '<|im_start|>observation\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")


# A template that writes calls as Llama 3.1's does (its own wording, the same layout): the call object as the whole
# answer, its arguments as JSON under "parameters". Turns end with the policy tokenizer's end of turn (SmolLM2's).
LLAMA_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and m.tool_calls -%}{{ '<|im_start|>assistant\\n' }}"
    "{%- for c in m.tool_calls -%}{%- if not loop.first -%}{{ '; ' }}{%- endif -%}"
    "{{ '{\"name\": \"' + c.function.name + '\", \"parameters\": ' + (c.function.arguments | tojson) + '}' }}"
    "{%- endfor -%}{{ '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' -%}{{ '<|im_start|>ipython\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")


# Templates that write calls as DeepSeek's do (their own wording, the same layouts): a section of calls between markers
# that DeepSeek's tokenizer holds as tokens of their own, V3.1's name and JSON arguments, V3's name and fenced JSON.
DEEPSEEK_V31_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and m.tool_calls -%}"
    "{{ '<|im_start|>assistant\\n' + (m.content or '') + '<｜tool▁calls▁begin｜>' }}"
    "{%- for c in m.tool_calls -%}"
    "{{ '<｜tool▁call▁begin｜>' + c.function.name + '<｜tool▁sep｜>' + (c.function.arguments | tojson) }}"
    "{{ '<｜tool▁call▁end｜>' }}{%- endfor -%}{{ '<｜tool▁calls▁end｜><|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")

DEEPSEEK_V3_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and m.tool_calls -%}"
    "{{ '<|im_start|>assistant\\n' + (m.content or '') + '<｜tool▁calls▁begin｜>' }}"
    "{%- for c in m.tool_calls -%}{%- if not loop.first -%}{{ '\\n' }}{%- endif -%}"
    "{{ '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + c.function.name + '\\n```json\\n' }}"
    "{{ (c.function.arguments | tojson) + '\\n```<｜tool▁call▁end｜>' }}"
    "{%- endfor -%}{{ '<｜tool▁calls▁end｜><|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")


# A template that writes calls as Mistral's do (its own wording, the same layout as vLLM's mistral3 template): after a
# [TOOL_CALLS] marker (a special token of Mistral's tokenizers) the calls as one JSON list, each with the last 9
# characters of its id, which a tool's answer names again.
MISTRAL_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and m.tool_calls -%}{{ '<|im_start|>assistant\\n[TOOL_CALLS] [' }}"
    "{%- for c in m.tool_calls -%}{%- if not loop.first -%}{{ ', ' }}{%- endif -%}"
    "{{ '{\"name\": ' + (c.function.name | tojson) + ', \"arguments\": ' + (c.function.arguments | tojson) }}"
    "{{ ', \"id\": \"' + c.id[-9:] + '\"}' }}"
    "{%- endfor -%}{{ ']<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' -%}"
    "{{ '<|im_start|>tool\\n' + m.content + ' [' + m.tool_call_id[-9:] + ']<|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")


# A template that writes calls as Kimi K2's does (its own wording, the same layout): a section of calls between markers
# (special tokens of Kimi's tokenizer), each call's id (``functions.NAME:N``) before its arguments; a tool's answer
# names the id it is for.
KIMI_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and m.tool_calls -%}"
    "{{ '<|im_start|>assistant\\n' + (m.content or '') + '<|tool_calls_section_begin|>' }}"
    "{%- for c in m.tool_calls -%}"
    "{{ '<|tool_call_begin|>' + c.id + '<|tool_call_argument_begin|>' + (c.function.arguments | tojson) }}"
    "{{ '<|tool_call_end|>' }}{%- endfor -%}{{ '<|tool_calls_section_end|><|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' -%}{{ '<|im_start|>tool\\n## Return of ' + m.tool_call_id + '\\n' + m.content }}"
    "{{ '<|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")
