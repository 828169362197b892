"""Doubles and helpers for testing the recording proxy (and things that talk to it).

``InProcessProxy`` runs the real proxy app in-process with a scripted engine and a temp data dir.
Only the engine and the tokenizer are stand-ins: by default the template is ``CharTemplate`` (one id
per byte), so unit tests need no model; ``policy_template()`` is the real SmolLM2 tokenizer with the
shipped tool-capable chat template, for tests that run with the model (``template=policy_template()``).
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from openforgerl.rollout.proxy.engine import Engine, ScriptedEngineConfig, ScriptTurn
from openforgerl.rollout.proxy.template import ChatTemplate, HFChatTemplate
from openforgerl.rollout.proxy_handle import ProxyHandle
from openforgerl.testing.chat import CharTemplate

ADMIN_TOKEN = "test-admin-token"
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


@functools.lru_cache(maxsize=1)
def policy_template(model: str = "smollm2") -> ChatTemplate:
    """The policy's template: the pulled model's tokenizer, else the tokenizer inside its GGUF."""
    from openforgerl.errors import UserError
    from openforgerl.models import registry

    try:
        return HFChatTemplate(registry.load_tokenizer(model))
    except UserError:
        import importlib

        from transformers import AutoTokenizer

        spec = registry.get_model(model)
        source = importlib.import_module(spec.source_module).__file__
        if source is None:  # a namespace package: no one directory holds the GGUF
            raise UserError(f"{spec.source_module} is not a regular package holding {spec.gguf_file}") from None
        package = Path(source).parent
        tokenizer = AutoTokenizer.from_pretrained(str(package), gguf_file=spec.gguf_file)
        tokenizer.chat_template = registry.chat_template_text(model)
        return HFChatTemplate(tokenizer)


THINKING_TEMPLATE = (
    "{%- set ns = namespace(last=messages|length - 1, found=false) -%}"
    "{%- for m in messages|reverse -%}{%- if not ns.found and m.role == 'user' -%}"
    "{%- set ns.found = true -%}{%- set ns.last = messages|length - 1 - loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}{%- set content = m.content or '' -%}"
    "{%- if m.role == 'assistant' -%}{%- set why = '' -%}"
    "{%- if '</think>' in content -%}{%- set why = content.split('</think>')[0].split('<think>')[-1].strip() -%}"
    "{%- set content = content.split('</think>')[-1].lstrip() -%}{%- endif -%}"
    "<|im_start|>assistant\n{% if loop.index0 > ns.last and why %}<think>\n{{ why }}\n</think>\n\n{% endif %}"
    "{{ content }}{% for c in m.tool_calls or [] %}\n<tool_call>\n{{ c.function | tojson }}\n</tool_call>{% endfor %}"
    "<|im_end|>\n{%- else -%}<|im_start|>{{ m.role }}\n{{ content }}<|im_end|>\n{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}")
"""A reasoning model's chat template, as Qwen3's behaves: an answer's reasoning (``<think>...</think>`` in its
content) is shown only for answers after the last user message, and dropped from earlier ones."""


def thinking_template() -> HFChatTemplate:
    """The policy's tokenizer under ``THINKING_TEMPLATE`` (a new template each call: its caches its own)."""
    import copy

    policy = policy_template()
    assert isinstance(policy, HFChatTemplate)
    tokenizer = copy.deepcopy(policy.tokenizer)
    tokenizer.chat_template = THINKING_TEMPLATE
    return HFChatTemplate(tokenizer)


def parse_sse(body: bytes | str) -> list[tuple[str | None, Any]]:
    """SSE text -> [(event name or None, parsed data or the raw string)]."""
    text = body.decode() if isinstance(body, bytes) else body
    events = []
    for block in text.split("\n\n"):
        name, data = None, []
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if data:
            raw = "\n".join(data)
            events.append((name, raw if raw == "[DONE]" else orjson.loads(raw)))
    return events


class InProcessProxy:
    """The real proxy app, in-process, over httpx's ASGI transport."""

    def __init__(self, turns: list[ScriptTurn] | None = None, *, data_dir: str | Path | None = None,
                 engine: Engine | None = None, respond: Callable[[list[int]], ScriptTurn] | None = None,
                 template: ChatTemplate | None = None, **config: Any) -> None:
        from openforgerl.rollout.proxy.config import ProxyConfig
        from openforgerl.rollout.proxy.engines.scripted import ScriptedEngine
        from openforgerl.rollout.proxy.server import build_app
        from openforgerl.rollout.proxy.tool_parser import tool_parser_for

        self.template = template or CharTemplate()
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="forge-proxy-test-"))
        scripted = ScriptedEngineConfig(turns=turns or [ScriptTurn(text="ok")])
        self.config = ProxyConfig(admin_token=ADMIN_TOKEN, data_dir=self.data_dir, engine=scripted, **config)
        self.engine = engine or ScriptedEngine(scripted, template=self.template,
                                               tool_parser=tool_parser_for(self.template, self.config.tool_parser),
                                               respond=respond)
        self.app = build_app(self.config, template=self.template, engine=self.engine)
        self.registry = self.app.registry

    def handle(self) -> ProxyHandle:
        """The orchestrator's admin client for this proxy (``run_rollouts(config, proxy=...)``).

        Its base URL only names the in-process app: harnesses reach it through ``client()``."""
        import httpx

        # httpx types an ASGI app's scope and messages as MutableMapping; ours takes plain dicts (what servers pass).
        transport = httpx.ASGITransport(app=self.app)  # type: ignore[arg-type]
        return ProxyHandle("http://proxy.test", ADMIN_TOKEN, self.data_dir, transport=transport)

    def client(self):
        import httpx

        transport = httpx.ASGITransport(app=self.app)  # type: ignore[arg-type]  # dicts vs MutableMapping, as above
        return httpx.AsyncClient(transport=transport, base_url="http://proxy.test", timeout=30)

    async def new_rollout(self, client, metadata: dict[str, Any] | None = None) -> tuple[str, str]:
        resp = await client.post("/rollouts", json={"metadata": metadata or {}},
                                 headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
        resp.raise_for_status()
        return resp.json()["id"], resp.json()["token"]

    async def trajectory(self, client, rollout_id: str) -> dict[str, Any]:
        resp = await client.get(f"/rollouts/{rollout_id}/trajectory",
                                headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
        resp.raise_for_status()
        return resp.json()


def tool_loop(proxy: InProcessProxy, tools: list[dict[str, Any]], calls: int) -> tuple[list[dict[str, Any]], dict]:
    """A harness's loop through ``proxy`` on the chat wire: ``calls`` calls offering ``tools``, each answer and a
    tool result per call it made (``ok 0``, ``ok 1``, ...) sent back with the next. Returns the conversation and
    the rollout's trajectory."""
    import asyncio

    async def loop() -> tuple[list[dict[str, Any]], dict]:
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            messages: list[dict[str, Any]] = [{"role": "system", "content": "You edit files."},
                                              {"role": "user", "content": "fix the bug"}]
            for _ in range(calls):
                resp = await client.post(PATHS["chat"], json={"messages": messages, "tools": tools},
                                         headers={"authorization": f"Bearer {token}"})
                message = resp.json()["choices"][0]["message"]
                made = message.get("tool_calls") or []
                messages = messages + [message] + [
                    {"role": "tool", "tool_call_id": c["id"], "content": f"ok {i}"} for i, c in enumerate(made)]
            return messages, await proxy.trajectory(client, rollout_id)

    return asyncio.run(loop())


def streamed_and_whole(parser: Any, whole: str, cuts: list[int], tools: list[dict[str, Any]] | None = None) -> \
        tuple[tuple[str, list[tuple[str, str]]], tuple[str, list[tuple[str, str]]]]:
    """A tool parser's (text, [(name, arguments)]) for ``whole`` streamed in the chunks ``cuts`` (sorted offsets)
    make, and for ``whole`` parsed at once: a parser's stream must say what the whole turn says."""
    from openforgerl.rollout.proxy.conversation import TextDelta, ToolCallDone

    chunks = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True)]
    stream = parser.stream(tools)
    events = [e for chunk in chunks for e in stream.feed(chunk)] + stream.finish()
    content, calls = parser.parse(whole, tools)
    return (("".join(e.text for e in events if isinstance(e, TextDelta)),
             [(e.call.name, e.call.arguments) for e in events if isinstance(e, ToolCallDone)]),
            (content, [(c.name, c.arguments) for c in calls]))
