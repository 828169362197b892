"""Configuration of ``forge proxy``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from openforgerl.paths import data_dir
from openforgerl.rollout.proxy.engine import EngineConfig, VLLMEngineConfig


class ProxyConfig(BaseModel):
    host: str = "127.0.0.1"
    """Interface to listen on."""
    port: int = 8100
    """Port to listen on (0: any free port)."""
    admin_token: str = Field(min_length=8)
    """Bearer token for the admin API (create/finish rollouts, read trajectories)."""
    model: str = "smollm2"
    """The policy: the name harnesses send as ``model`` and the tokenizer/chat template to load."""
    tokenizer: str | None = None
    """A Hugging Face tokenizer directory to use instead of the model registry's."""
    tool_parser: str = "auto"
    """How the policy writes tool calls (see tool_parser.TOOL_PARSERS): ``auto`` (the parser that reads the calls
    the policy's chat template writes), ``hermes`` (JSON in ``<tool_call>``: Qwen2.5, Qwen3, SmolLM2's template
    here), ``qwen3_coder`` (XML-like parameters, typed by the call's tool schemas), ``glm45`` (GLM-4.5/4.6/4.7: the
    name, then ``<arg_key>``/``<arg_value>`` pairs), ``llama3_json`` (Llama 3.x: the answer is
    ``{"name": ..., "parameters": ...}`` objects), ``deepseek_v31`` or ``deepseek_v3`` (DeepSeek V3.1, V3-0324 /
    R1-0528: a section of calls between DeepSeek's marker tokens, kept in the text it reads where they are special
    tokens), ``mistral`` (after ``[TOOL_CALLS]``: a JSON list of calls, or ``NAME[ARGS]{...}``) or ``kimi_k2``
    (Kimi K2: a section of calls, each id ``functions.NAME:N``). At start the proxy checks the parser reads a call
    as the template writes it, and refuses one that does not (it would turn every call into plain text)."""
    unknown_model: Literal["serve", "reject"] = "serve"
    """A request naming another model: serve it with the policy anyway, or answer 404."""
    data_dir: Path = Field(default_factory=lambda: data_dir() / "proxy")
    """Where rollout logs are written (and recovered from on start): recorded data, not a cache."""
    max_body_bytes: int = 32 * 1024 * 1024
    """Larger request bodies get a 413."""
    max_inflight: int = 0
    """Engine calls at once (0: no limit); the rest wait, and their wait is the queue time."""
    engine: EngineConfig = Field(default_factory=VLLMEngineConfig)
    """The inference engine behind the proxy (vLLM from ``forge serve`` unless set; ``scripted`` for tests)."""
    max_context_tokens: int = Field(0, ge=0)
    """The policy's context in tokens (prompt + answer): a prompt that leaves no room to sample is refused
    before it reaches the engine, with the harness's own context-length error (harnesses compact on it).
    0: not set here; the vLLM engine's ``max_model_len`` applies (the smaller of the two when both are known)."""
    max_tokens: int = Field(4096, ge=0)
    """Response cap per call: used when a harness sets no max_tokens (Codex, Claude Code) and as the
    ceiling when it asks for more, so one rambling call cannot hold a rollout until the context is
    full. 0: no cap (the engine's context is the only limit)."""
    rollout_max_tokens: int = Field(0, ge=0)
    """Tokens the policy may generate in one rollout (0: no budget). A call is capped to what is left; once
    it is spent every further call is answered at once as a length stop (no engine call) and the rollout
    is marked ``truncated`` (trainers mask or penalise it), so a rambling policy cannot stall a step."""
    rollout_max_calls: int = Field(0, ge=0)
    """Model calls one rollout may make (0: no budget); past it, the same length stop and ``truncated``."""
    shard: int = Field(0, ge=0)
    """This process's index among the proxy's shards (set by the shard set that starts it)."""
    shards: int = Field(1, ge=1)
    """How many shards the proxy has (``forge proxy --workers N``): tokens carry their shard, so a call
    sent to the wrong one gets a 421 naming the right base URL."""
    shard_map: Path | None = None
    """With ``shards`` > 1: the JSON file listing every shard's URLs (written by the shard set once all
    listen), read to name the right shard in that 421."""
    force_tool_calls: int = Field(0, ge=0)
    """For policies too small to call tools on their own: the first N calls of each rollout that offer
    tools with tool_choice auto are made to start a tool call, as tool_choice "required" does (the
    forced tokens are recorded with mask 0). Harnesses such as Codex never send "required" themselves."""
