"""The LLM proposer: a model picks a family's parameters from the asset's real entities and rewords
the instruction; the family renders the verifier, the solution and the failure cases.

Any OpenAI-compatible endpoint (the local SmolLM2 on vLLM by default). The prompt
(templates/synth/{system,user}.jinja) shows the asset, the family, its parameter schema with enums
of what exists, one valid example (from the procedural proposer, so always valid) and the titles
already kept; the answer is asked for as JSON by schema (``response_format``). Parameters that do
not parse are retried, then the proposal is rejected with its reason (``schema.malformed``); never
a crash. A reworded instruction is used only when it names every value the verifier checks (else
the family's own instruction stays, and the candidate says why).

Invariant: what a model writes is data — parameters are checked against the asset (grounding)
before anything is rendered, and no text from the model reaches a verifier or a solution.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import jinja2
from pydantic import BaseModel, Field

from openforgerl.errors import ProviderError
from openforgerl.synth.candidate import Candidate
from openforgerl.synth.proposers import Slot, candidate_id, candidate_rng

MAX_REFUSALS = 20
"""Requests an endpoint may refuse (HTTP 400) before the run stops: one is a candidate's problem, many the setup's."""
GRAMMAR_UNSUPPORTED = frozenset({"not", "if", "then", "else", "dependentSchemas", "dependentRequired", "contains",
                                 "minContains", "maxContains", "uniqueItems", "multipleOf", "propertyNames",
                                 "patternProperties", "unevaluatedProperties"})
"""JSON-schema keywords constrained decoders (vLLM's guided decoding among them) refuse, or that make vLLM
leave xgrammar for another backend; the critic checks them."""
LENGTH_WITH_PATTERN = frozenset({"minLength", "maxLength"})
"""Dropped from a string schema that also has a ``pattern`` or ``format``: xgrammar cannot combine them, and vLLM
then compiles the request with its guidance backend instead. vLLM keeps one backend per server, chosen by the
first constrained request, and under guidance its forced tool calls (``tool_choice: required``) fail (HTTP 500,
vLLM 0.32): one proposal would break every rollout served after it."""


class RequestRefused(Exception):
    """The endpoint refused one request (HTTP 400): that candidate is rejected, the run goes on."""


def grammar_schema(schema: Any) -> Any:
    """``schema`` without the keywords constrained decoding cannot express. What they said (a new title
    must not be an existing one, say) is still enforced: ``check_params`` runs on every proposal."""
    if isinstance(schema, dict):
        drop = GRAMMAR_UNSUPPORTED | (LENGTH_WITH_PATTERN if "pattern" in schema or "format" in schema else set())
        return {key: grammar_schema(value) for key, value in schema.items() if key not in drop}
    if isinstance(schema, list):
        return [grammar_schema(item) for item in schema]
    return schema


class LlmSettings(BaseModel):
    """The proposer model."""

    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible endpoint (default: forge serve's vLLM)."""
    model: str | None = None
    """Model name; default: the first one the endpoint lists."""
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(0.9, ge=0, le=2)
    """High, for variety."""
    max_tokens: int = Field(512, gt=0)
    attempts: int = Field(2, ge=1)
    """Tries per proposal before it is rejected as malformed."""
    timeout_s: float = Field(120.0, gt=0)
    json_schema: bool = True
    """Ask for the answer by JSON schema (response_format); off for endpoints that refuse it."""
    mode: Literal["params", "freeform"] = "params"
    """params: the model picks a family's parameters (and may reword); freeform: it writes the whole task,
    verifier (declarative checks only), solution and failure cases, which build-env checks in containers."""


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: list[str] = field(default_factory=list)


def _jinja() -> jinja2.Environment:
    folder = Path(str(files("openforgerl.templates"))) / "synth"
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), autoescape=False,
                              keep_trailing_newline=True)


def prompt_messages(slot: Slot, example: dict[str, Any], example_instruction: str, avoid: list[str],
                    difficulty: str = "easy") -> list[dict[str, str]]:
    jinja = _jinja()
    system = "freeform.jinja" if slot.family.name.endswith(".freeform") else "system.jinja"
    context = {"asset": slot.asset.config, "family": slot.family, "avoid": avoid[-20:], "difficulty": difficulty,
               "schema": json.dumps(slot.family.params_schema(slot.asset, slot.state), indent=1)[:6000],
               "example_params": json.dumps(example), "example_instruction": json.dumps(example_instruction)}
    return [{"role": "system", "content": jinja.get_template(system).render(**context)},
            {"role": "user", "content": jinja.get_template("user.jinja").render(**context)}]


def parse_proposal(text: str) -> tuple[dict[str, Any], str | None]:
    """(params, instruction or None) from a reply; ValueError saying what is wrong."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError(f"no JSON object in the reply: {text[:160]!r}")
    try:
        data = json.loads(text[start:end + 1])
    except ValueError as exc:
        raise ValueError(f"the reply is not JSON ({exc}): {text[start:start + 160]!r}") from None
    if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
        raise ValueError(f"the reply has no \"params\" object: {json.dumps(data)[:160]}")
    instruction = data.get("instruction")
    return data["params"], instruction.strip() if isinstance(instruction, str) and instruction.strip() else None


class LlmProposer:
    """One call (plus retries) per proposal."""

    def __init__(self, settings: LlmSettings) -> None:
        self.settings = settings
        self.usage = Usage()
        self.refusals = 0
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            import openai  # slow to import; only when a model is used

            base = self.settings.base_url.rstrip("/")
            base = base if re.search(r"/v\d+$", base) else base + "/v1"
            self._client = openai.OpenAI(base_url=base, api_key=os.environ.get(self.settings.api_key_env) or "none",
                                         timeout=self.settings.timeout_s, max_retries=0)
        return self._client

    def model(self) -> str:
        if not self.settings.model:
            listed = self._call(lambda: self.client.models.list().data)
            if not listed:
                raise ProviderError(f"{self.settings.base_url} lists no model", fix="pass --model NAME")
            self.settings.model = listed[0].id
        return self.settings.model

    def check(self) -> None:
        """The endpoint answers (and names its model): one line with the fix before anything is proposed."""
        self.model()

    def propose(self, slot: Slot, index: int, seed: int, avoid: list[str]) -> Candidate:
        rng = candidate_rng(seed, index)
        example = slot.family.sample(rng, slot.asset, slot.state)
        example_instruction = slot.family.render(example, slot.asset, slot.state).instruction
        messages = prompt_messages(slot, example, example_instruction, avoid)
        candidate = Candidate(id=candidate_id(slot, index), domain=slot.asset.domain, asset=slot.asset.name,
                              family=slot.family.name, params={}, proposer=f"llm:{self.model()}", index=index,
                              prompt_hash=hashlib.sha256(json.dumps(messages).encode()).hexdigest()[:16])
        problem = ""
        for _ in range(self.settings.attempts):
            try:
                text = self._complete(messages, slot)
            except RequestRefused as exc:  # this request, not the endpoint: the candidate fails, the run goes on
                candidate.reject("schema.refused", f"the endpoint refused the request: {exc}")
                return candidate
            try:
                candidate.params, candidate.paraphrase = parse_proposal(text)
                return candidate
            except ValueError as exc:
                problem = str(exc)
        candidate.reject("schema.malformed", f"{self.settings.attempts} replies, none usable; last: {problem}")
        return candidate

    def _complete(self, messages: list[dict[str, str]], slot: Slot) -> str:
        kwargs: dict[str, Any] = {}
        if self.settings.json_schema:
            schema = {"type": "object", "required": ["params"],
                      "properties": {"params": grammar_schema(slot.family.params_schema(slot.asset, slot.state)),
                                     "instruction": {"type": "string"}}}
            kwargs["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "task_proposal", "schema": schema}}
        reply = self._call(lambda: self.client.chat.completions.create(
            model=self.model(), messages=messages, temperature=self.settings.temperature,
            max_tokens=self.settings.max_tokens, **kwargs))
        self.usage.calls += 1
        if getattr(reply, "usage", None) is not None:
            self.usage.prompt_tokens += reply.usage.prompt_tokens or 0
            self.usage.completion_tokens += reply.usage.completion_tokens or 0
        return reply.choices[0].message.content or ""

    def _call(self, request: Any) -> Any:
        import openai

        try:
            return request()
        except openai.BadRequestError as exc:
            self.refusals += 1
            if self.refusals > MAX_REFUSALS:
                raise ProviderError(f"proposer model at {self.settings.base_url} refused {self.refusals} requests; "
                                    f"the last: {exc}", fix="check --model, or turn off -o llm.json_schema") from exc
            raise RequestRefused(str(exc)) from exc
        except openai.OpenAIError as exc:
            raise ProviderError(f"proposer model at {self.settings.base_url} failed: {exc}",
                                fix="check --base-url (an OpenAI-compatible /v1 endpoint) is up, e.g. forge serve") \
                from exc
