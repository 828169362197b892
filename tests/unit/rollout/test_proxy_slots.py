"""Runs rendered through their shapes give the template's own text, and templates that use a text for more than
writing it out render such runs through Jinja.

New tool outputs and answers come on every call; the proxy renders their runs as a cached shape with the texts
put in (``slots``). A wrong text here is a wrong prompt for the policy, so every template below is compared with
its full render on texts it branches on or changes.
"""

from __future__ import annotations

from copy import deepcopy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openforgerl.rollout.proxy import slots
from openforgerl.rollout.proxy.template import HFChatTemplate
from openforgerl.testing.proxy import policy_template

HEAD = ("{% for m in messages %}{% if loop.first %}<|im_start|>system\n{{ m.content }}<|im_end|>\n"
        "{% else %}<|im_start|>{{ m.role }}\n")
TAIL = "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
USING = {  # what each template does with a message's content, and whether shapes stay on for it
    "writes it": ("{{ m.content }}", True),
    "strips it": ("{{ m.content | trim }}", True),
    "branches on a tag in it": ("{% if '</think>' in m.content %}{{ m.content.split('</think>')[-1] }}"
                                "{% else %}{{ m.content }}{% endif %}", True),
    "checks how it starts": ("{% if m.content.startswith('<tool_response>') %}T:{% endif %}{{ m.content }}", True),
    "writes it as JSON": ("{{ m.content | tojson }}", True),
    "writes it as ASCII JSON": ("{{ m.content | tojson(ensure_ascii=True) }}", True),
    "measures it": ("{% if m.content | length > 5 %}long {% endif %}{{ m.content }}", True),
    "adds to it, then strips": ("{{ (m.content + '\n') | trim }}", True),
    "joins it with ~, then strips": ("{{ ('\n' ~ m.content ~ '\n') | trim }}", False),
    "escapes it": ("{{ m.content | e }}", True),
}
TEXTS = ["plain", " lead and trail \n", "<think>x</think>\nanswer", "<tool_response>\nr\n</tool_response>",
         'quote " \\ <&>', "d\u00e9j\u00e0 \U0001f600", "abcdefgh", "ab", "\n"]


def template(body: str) -> HFChatTemplate:
    tokenizer = deepcopy(policy_template().tokenizer)
    tokenizer.chat_template = HEAD + body.replace("m.content", "(m.content or '')") + TAIL
    return HFChatTemplate(tokenizer)


@pytest.fixture(scope="module")
def policy() -> HFChatTemplate:
    template = policy_template()
    assert isinstance(template, HFChatTemplate)
    template.prepare()
    return template


def test_the_policy_template_renders_new_runs_through_their_shapes(policy):
    """The shipped template writes contents, arguments and ids out whole: new runs come from a few shapes."""
    assert policy._slots is True
    messages = [{"role": "system", "content": "s"}]
    for i in range(20):
        messages += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "ls", "arguments": f'{{"p": {i}}}'}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"file {i}\n" * i},
            {"role": "user", "content": f"next {i}"}]
    policy._texts.clear()
    policy._shapes.clear()
    assert policy.render(messages, None, True) == policy.full_render(messages, None, True)
    assert 2 <= len(policy._shapes._values) <= 4  # one tool-call answer, one tool result, one user turn (+ empty)


@pytest.mark.parametrize("use", USING)
def test_a_template_that_uses_a_text_renders_it_as_a_full_render_does(use):
    body, shapes = USING[use]
    odd = template(body)
    odd.prepare()
    assert odd._incremental is True
    assert odd._slots is shapes  # on unless the per-template check saw a difference
    for text in TEXTS:
        for role in ("user", "assistant", "tool"):
            messages = [{"role": "system", "content": "s"}, {"role": role, "content": text},
                        {"role": "user", "content": text + text}]
            assert odd.render(messages, None, True) == odd.full_render(messages, None, True), (use, text, role)


def test_a_shape_whose_text_the_template_uses_is_refused_and_one_it_writes_is_kept():
    odd = template(USING["checks how it starts"][0])
    odd.prepare()
    refused = slots.shape([{"role": "user", "content": "x"}])
    assert refused is not None and slots.pieces(refused[0], odd._run_text) == ()
    plain = template("{{ m.content }}")
    plain.prepare()
    kept = slots.shape([{"role": "user", "content": "x"}])
    assert kept is not None
    parts = slots.pieces(kept[0], plain._run_text)
    assert parts == ("<|im_start|>user\n", 0, "<|im_end|>\n")
    assert slots.fill(parts, ["hello"]) == "<|im_start|>user\nhello<|im_end|>\n"


def test_a_template_testing_whether_a_text_holds_a_tag_keeps_its_shape_for_texts_that_answer_alike():
    """``'</think>' in content`` (Qwen3's templates test answers so): the shape is kept with a guard; a text without
    the tag fills it, one with the tag renders through Jinja. ``in`` on a string made from a text is refused."""
    branching = template(USING["branches on a tag in it"][0])
    branching.prepare()
    assert branching._slots is True
    shaped = slots.shape([{"role": "assistant", "content": "x"}])
    assert shaped is not None
    parts = slots.pieces(shaped[0], branching._run_text)
    assert parts == ("<|im_start|>assistant\n", 0, "<|im_end|>\n") and parts.guards == ((0, "</think>", False),)
    assert slots.holds(parts, ["Looking."]) and not slots.holds(parts, ["<think>hm</think>Looking."])
    for text in ("Looking.", "<think>hm</think>Looking."):
        run = [{"role": "assistant", "content": text}]
        assert branching._new_run_text(run) == branching._run_text(run)
    joined = template("{% if '!' in (m.content + '?') %}!{% endif %}{{ m.content }}")
    assert slots.pieces(shaped[0], joined._run_text) == ()
    second = template("{% if '\t' in m.content %}T{% endif %}{{ m.content }}")  # the second texts hold a tab:
    assert slots.pieces(shaped[0], second._run_text) == ()  # they answer otherwise than the placeholder, refused


def call(arguments) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": arguments}}]}


def test_an_arguments_object_of_strings_renders_through_its_shape_as_json(policy):
    """Canonical tool calls carry arguments as an object, which the template writes as JSON: its strings are
    slots holding their JSON text, so an answer calling a tool renders through its shape too."""
    arguments = {"cmd": 'grep -n "x\\y" a.py\n\t\u00e9 \U0001f600 <&>', "cwd": "", "check": True}
    shaped = slots.shape([call(arguments)])
    assert shaped is not None and len(shaped[1]) == 2  # the id and the one non-empty string
    parts = slots.pieces(shaped[0], policy._run_text)
    assert parts and slots.fill(parts, shaped[1]) == policy._run_text([call(arguments)])
    # Codex's shell tool: a list of strings, a number; others send nested objects and floats
    for arguments in ({"command": ["bash", "-lc", 'ls -la "x"\n\u00e9'], "workdir": "/w", "timeout_ms": 10000},
                      {"edits": [{"old": "a\n", "new": "b"}], "ratio": 0.5, "none": None}):
        shaped = slots.shape([call(arguments)])
        assert shaped is not None
        parts = slots.pieces(shaped[0], policy._run_text)
        assert parts and slots.fill(parts, shaped[1]) == policy._run_text([call(arguments)]), arguments
    messages = [{"role": "system", "content": "s"}, call(arguments), {"role": "tool", "tool_call_id": "c1",
                                                                      "content": "out"}]
    assert policy.render(messages, None, True) == policy.full_render(messages, None, True)


@pytest.mark.parametrize("writes", [
    "{% for k, v in args.items() %}{{ k }}={{ v }} {% endfor %}",  # the values as they are, not as JSON
    "{{ args | tojson(ensure_ascii=True) }}",
    "{{ args | tojson(indent=2) }}",
    "{{ args | tojson(sort_keys=True) }}",
    "{% for k, v in args.items() %}{% if v is number %}{{ k }}:{{ v }}{% else %}{{ v | tojson }}{% endif %}"
    "{% endfor %}",  # by the value's type
    "{% for k, v in args.items() %}{% if v is sequence and v is not string %}{{ v | join(' ') }}{% else %}"
    "{{ v }}{% endif %}{% endfor %}",
    "{% for k, v in args.items() %}{% if v %}{{ k }}={{ v | tojson }}{% else %}{{ k }} unset{% endif %}"
    "{% endfor %}",  # by the value's truth: 0, [] and {} are false, a placeholder is true
])
def test_a_template_that_writes_an_arguments_object_its_own_way_renders_it_as_a_full_render_does(writes):
    odd = template("{{ m.content }}{% for c in m.tool_calls or [] %}{% set args = c.function.arguments %}"
                   "{% if args is mapping %}" + writes + "{% else %}{{ args }}{% endif %}{% endfor %}")
    odd.prepare()
    assert odd._incremental is True  # else every render is the full one, and this test shows nothing
    for arguments in ({"cmd": 'echo "hi"\n\u00e9'}, {"cmd": "ls", "cwd": "/tmp"},
                      {"command": ["bash", "-lc", "ls"], "timeout_ms": 5, "env": {"b": 1, "a": "x"}},
                      {"command": [], "timeout_ms": 0, "ratio": 0.0, "env": {}, "cwd": ""}):
        messages = [{"role": "system", "content": "s"}, call(arguments)]
        assert odd.render(messages, None, True) == odd.full_render(messages, None, True), (writes, arguments)


def test_a_run_with_a_long_value_besides_its_texts_has_no_shape(policy):
    """Such a run's shape would be new on every call (two renders instead of one): it renders through Jinja."""
    for run in ([{"role": "assistant", "content": "x", "reasoning_content": "why " * 40}],
                [{"role": "tool", "tool_call_id": "c1", "content": "out", "name": "n" * 100}]):
        assert slots.shape(run) is None
        messages = [{"role": "system", "content": "s"}, *run]
        assert policy.render(messages, None, True) == policy.full_render(messages, None, True)
    assert slots.shape([{"role": "tool", "tool_call_id": "c1", "content": "out"}]) is not None


def test_a_text_holding_the_placeholder_mark_renders_through_the_template(policy):
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": f"odd {slots.MARK}\n<&\"'\\0\ue001"}]
    assert slots.shape(messages[1:]) is None
    assert policy.render(messages, None, True) == policy.full_render(messages, None, True)


def test_shapes_off_by_setting(monkeypatch):
    from openforgerl.rollout.proxy import template as template_module

    monkeypatch.setattr(template_module, "USE_SLOTS", False)
    plain = template("{{ m.content }}")
    plain.prepare()
    assert plain._slots is False


text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(contents=st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), text), min_size=1, max_size=8),
       use=st.sampled_from(sorted(USING)))
def test_any_texts_render_as_the_full_render_does(contents, use):
    """Whatever the texts, with the text cache cold (each run from its shape or Jinja)."""
    odd = TEMPLATES.get(use) or TEMPLATES.setdefault(use, template(USING[use][0]))
    messages = [{"role": "system", "content": "s"}, *({"role": r, "content": c} for r, c in contents)]
    odd._texts.clear()
    assert odd.render(messages, None, True) == odd.full_render(messages, None, True)


TEMPLATES: dict[str, HFChatTemplate] = {}


def test_false_values_of_an_arguments_object_stay_in_the_shape(policy):
    """A placeholder is always true, and so is each second value: 0, [] and {} (like "" and null) keep their place in
    the shape, so a template that tests a value's truth renders through shapes and right."""
    truth = template("{{ m.content }}{% for c in m.tool_calls or [] %}{% set args = c.function.arguments %}"
                     "{% if args is mapping %}{% for k, v in args.items() %}{% if v %}{{ k }}={{ v | tojson }} "
                     "{% else %}{{ k }} unset {% endif %}{% endfor %}{% else %}{{ args }}{% endif %}{% endfor %}")
    truth.prepare()
    assert truth._slots is True  # the per-template check found no difference
    shaped = slots.shape([call({"n": 0, "l": [], "d": {}, "f": 0.0, "m": 5})])
    assert shaped is not None and shaped[1] == ["c1", "5"]
    for arguments in ({"n": 0, "l": [], "d": {}, "f": 0.0}, {"n": 3, "l": ["x"], "d": {"k": 1}, "f": 0.5}):
        messages = [{"role": "system", "content": "s"}, call(arguments)]
        assert truth.render(messages, None, True) == truth.full_render(messages, None, True)
