"""veRL's agent loop for forge tasks: one harness rollout per ``run``, one training row per segment.

veRL (0.9.x, V1 trainer) calls ``ForgeAgentLoop.run`` once per (prompt, session) inside an agent-loop
worker. ``run`` starts a recording proxy in this process whose engine is veRL's own
``server_manager.generate`` (``VerlEngine``: token ids in and out, routed under the rollout's id),
runs the row's task with its harness through the orchestrator (Docker or whatever runtime the loop's
``rollout`` settings name), verifies, and turns the recorded trajectory into ``AgentLoopOutput``s.

Key invariants:
- a row's ids, mask and log-probs are the proxy's segment, never re-tokenised; a segment too long
  for veRL's shapes is truncated at the end of its response (the mask and log-probs cut with it) or,
  when its prompt alone is too long, dropped, and ``extra_fields`` says so;
- the reward sits on the last output (veRL copies it to the others of the session);
- a rollout that is not the policy's doing (``infra_error``, ``verifier_error``, ``cancelled``) leaves its
  GRPO group: ``run`` returns ``[]``, and veRL's group statistics run over the survivors;
- at most ``max_sandboxes`` rollouts run at once per worker process (a module-level semaphore: veRL
  starts every sample of a batch as its own task with no cap).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import weakref
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, Field
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from openforgerl.errors import UserError
from openforgerl.log import get_logger
from openforgerl.rollout.harness import Harness
from openforgerl.rollout.harnesses import make_harness
from openforgerl.rollout.orchestrator import RolloutConfig, RolloutResult, final_tries
from openforgerl.rollout.proxy.engines.verl import CallStats, VerlEngine
from openforgerl.rollout.proxy.server import settle_heap_once
from openforgerl.rollout.proxy.template import ChatTemplate, HFChatTemplate, load_chat_template
from openforgerl.rollout.proxy.tool_parser import tool_parser_for
from openforgerl.rollout.proxy_handle import ProxyHandle, listen
from openforgerl.rollout.run import prepare_run
from openforgerl.rollout.runtime import NetworkMode, Reach, Runtime
from openforgerl.rollout.runtimes import make_runtime
from openforgerl.tasks import Task
from openforgerl.train.verl.dataset import TaskSpec

log = get_logger(__name__)
AGENT_NAME = "forge_agent"
LEAVES_GROUP = ("infra_error", "verifier_error", "cancelled")
"""Statuses that are not the policy's doing: such a rollout gives no rows and leaves its GRPO group."""
DEFAULT_MAX_SANDBOXES = 8
TOOL_PARSER_SETTING = f"the {AGENT_NAME} agent loop's tool_parser"
"""How errors name ``ForgeLoopSettings.tool_parser``: the key of the agent-loop YAML entry."""


class ForgeLoopSettings(BaseModel):
    """The agent-loop YAML entry's extra keys (veRL passes them to the constructor)."""

    rollout: dict[str, Any] = Field(default_factory=dict)
    """``forge rollout`` settings shared by every row (runtime, proxy, network, timeouts, judge, model...);
    the row gives task and harness. ``proxy.max_tokens`` / ``proxy.max_context_tokens`` default to
    veRL's ``response_length`` / ``prompt_length + response_length``."""
    max_sandboxes: int = Field(DEFAULT_MAX_SANDBOXES, ge=1)
    """Rollouts at once in one agent-loop worker process (the first value a process sees wins)."""
    run_dir: str = "runs/verl"
    """Where each rollout's run directory goes: ``<run_dir>/step<global step>/<task>-<uid>-<session>``."""
    tokenizer_dir: str | None = None
    """A tokenizer directory (or a forge model name, e.g. smollm2) whose tool-capable chat template the proxy
    renders with; unset: veRL's own tokenizer and its chat template."""
    tool_parser: str = "auto"
    """How the policy writes tool calls (see rollout/proxy/tool_parser.py; ``auto``: as its chat template does)."""
    settle_heap: bool = True
    """At the worker process's first rollout, collect once and take its heap (torch, veRL, Ray, the model's
    tokenizer) out of the cyclic collector's view, and collect the young generation every 20,000 allocations
    (``proxy.server.settle_heap``, as ``forge proxy`` does): the rollouts' proxies run on this process's event
    loop, which a full collection over ~530k objects stopped for ~280 ms. What the worker holds then (the first
    batch's rows too) is still freed when its last reference goes; only a reference cycle among those objects
    would stay until exit. False: leave the process's GC as is."""


_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
_templates: dict[Hashable, ChatTemplate] = {}


def sandbox_slots(limit: int) -> asyncio.Semaphore:
    """This process's bound on rollouts at once (one per event loop; the first ``limit`` wins)."""
    loop = asyncio.get_running_loop()
    if loop not in _slots:
        _slots[loop] = asyncio.Semaphore(limit)
    return _slots[loop]


class ForgeAgentLoop(AgentLoopBase):
    """One forge rollout per ``run``: the row's task, with the row's harness, on veRL's policy.

    ``runtime``, ``harness`` and ``template`` replace what the settings and the row name (tests, custom
    adapters); veRL itself passes only its own arguments and the YAML entry's keys."""

    def __init__(self, *args: Any, rollout: Mapping[str, Any] | None = None,
                 max_sandboxes: int = DEFAULT_MAX_SANDBOXES, run_dir: str = "runs/verl",
                 tokenizer_dir: str | None = None, tool_parser: str = "auto", settle_heap: bool = True,
                 runtime: Runtime | None = None, harness: Harness | None = None, template: ChatTemplate | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = ForgeLoopSettings(rollout=_plain(rollout or {}), max_sandboxes=max_sandboxes,
                                          run_dir=run_dir, tokenizer_dir=tokenizer_dir, tool_parser=tool_parser,
                                          settle_heap=settle_heap)
        self.runtime, self.harness, self._template = runtime, harness, template
        self._parser_checked = False
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)

    @property
    def template(self) -> ChatTemplate:
        if self._template is None:
            key = self.settings.tokenizer_dir or id(self.tokenizer)
            if key not in _templates:  # rendering caches live on the template: one per process
                _templates[key] = _load_template(self.settings.tokenizer_dir) if self.settings.tokenizer_dir \
                    else HFChatTemplate(self.tokenizer)
            self._template = _templates[key]
        if not self._parser_checked:  # checked here, so that a refusal names this entry's key, not the proxy's
            tool_parser_for(self._template, self.settings.tool_parser, setting=TOOL_PARSER_SETTING)
            self._parser_checked = True
        return self._template

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        if self.settings.settle_heap:
            settle_heap_once()  # before this run makes anything: only what the worker holds for good is frozen
        spec = TaskSpec.from_extra_info(kwargs.get("extra_info"))
        config = self.rollout_config_for(spec, kwargs)
        engine = VerlEngine(self.server_manager, sampling_params=sampling_params, stop_ids=self.template.stop_ids,
                            response_length=self.response_length, context_tokens=self.context_tokens())
        async with sandbox_slots(self.settings.max_sandboxes):
            result, trajectory = await run_one(config, engine, self.template, harness=self.harness,
                                               runtime=self.runtime, tool_parser=self.settings.tool_parser)
        if result.status in LEAVES_GROUP or trajectory is None:
            log.warning("rollout %s of %s leaves its group: %s (%s)", result.rollout_id, spec.task, result.status,
                        result.reason or "no trajectory")
            return []
        return segment_outputs(trajectory, result, prompt_length=self.prompt_length,
                               response_length=self.response_length,
                               logprobs=bool(sampling_params.get("logprobs", True)), stats=engine.stats)

    def context_tokens(self) -> int:
        """One call's prompt + answer at most: what a training row can hold (or less, by ``max_model_len``)."""
        limit = self.prompt_length + self.response_length
        max_model_len = self.rollout_config.get("max_model_len")
        return min(limit, int(max_model_len)) if max_model_len else limit

    def rollout_config_for(self, spec: TaskSpec, row: Mapping[str, Any]) -> RolloutConfig:
        """The loop's shared settings with the row's task and harness: one attempt, no retry (a retry
        would be another sample of the group), its own run directory."""
        _check_pinned(spec)
        base = dict(self.settings.rollout)
        proxy = dict(base.pop("proxy", None) or {})
        proxy["max_tokens"] = min(int(proxy.get("max_tokens") or self.response_length), self.response_length)
        proxy["max_context_tokens"] = min(int(proxy.get("max_context_tokens") or self.context_tokens()),
                                          self.context_tokens())
        where = Path(self.settings.run_dir) / f"step{row.get('global_steps', 0)}" / \
            f"{spec.task}-{str(row.get('uid', ''))[:8] or secrets.token_hex(4)}-{row.get('session_id', 0)}"
        return RolloutConfig(**{**base, "tasks": [spec.path], "harness": spec.harness,
                                "harness_options": spec.harness_options, "attempts": 1, "concurrency": 1,
                                "retry_infra": 0, "run_dir": str(where), "proxy": proxy})


def _load_template(tokenizer: str) -> ChatTemplate:
    """A tokenizer directory's template, else the forge model of that name (its tool-capable template)."""
    return load_chat_template(tokenizer, tokenizer if Path(tokenizer).is_dir() else None)


def _plain(value: Any) -> Any:
    """veRL hands the YAML entry's nested keys over as OmegaConf nodes; plain dicts from here on."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return dict(value)


def _check_pinned(spec: TaskSpec) -> None:
    """A task whose task.toml no longer pins the image the dataset was built from is refused."""
    pinned = Task.load(spec.path).config.environment.docker_image
    if spec.image and pinned != spec.image:
        raise UserError(f"task {spec.task}: task.toml pins {pinned}, the dataset {spec.image}",
                        fix="rerun forge build-env on it and export the dataset again")


async def run_one(config: RolloutConfig, engine: VerlEngine, template: ChatTemplate, *, harness: Harness | None = None,
                  runtime: Runtime | None = None,
                  tool_parser: str = "auto") -> tuple[RolloutResult, dict[str, Any] | None]:
    """One rollout of ``config`` (one task, one attempt) through a proxy of its own on ``engine``: its
    result and the trajectory the proxy recorded (None when none was saved)."""
    harness = harness or make_harness(config.harness, **config.harness_options)
    runtime = runtime or make_runtime(config.runtime)
    async with rollout_proxy(config, engine, template, tool_parser) as proxy:
        prepared = await prepare_run(config, harness, runtime, proxy=proxy.handle)
        await proxy.serve_sandboxes(prepared.reach)
        run_dir, results = await prepared.execute()
    [result] = final_tries(results)
    if not result.trajectory:
        return result, None
    return result, json.loads((run_dir / result.trajectory).read_text(encoding="utf-8"))


class RoutedHandle(ProxyHandle):
    """The admin client of a one-rollout proxy: the rollout's id becomes the engine's request id."""

    def __init__(self, *args: Any, engine: VerlEngine, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.engine = engine

    async def create(self, metadata: dict[str, Any]) -> tuple[str, str]:
        rollout_id, token = await super().create(metadata)
        self.engine.request_id = rollout_id
        return rollout_id, token


class RolloutProxy:
    """A proxy app in this process, listening on loopback and, once the run knows how its sandboxes
    reach this host, on those addresses too (model routes only)."""

    def __init__(self, app: Any, handle: RoutedHandle, host: str) -> None:
        self.app, self.handle, self.host = app, handle, host
        self.listeners: list[tuple[Any, asyncio.Task[None], int]] = []

    async def serve_sandboxes(self, reach: Mapping[NetworkMode, Reach]) -> None:
        from openforgerl.rollout.proxy.app import ModelApi

        for address in sorted({way.address for way in reach.values() if way.address}):
            if address in self.handle.sandbox_urls or address in ("127.0.0.1", "::1", "localhost"):
                continue
            self.listeners.append(await listen(ModelApi(self.app), address, 0))
            self.handle.sandbox_urls[address] = f"http://{address}:{self.listeners[-1][2]}"


@contextlib.asynccontextmanager
async def rollout_proxy(config: RolloutConfig, engine: VerlEngine, template: ChatTemplate,
                        tool_parser: str = "auto") -> AsyncIterator[RolloutProxy]:
    """The proxy of one rollout: ``engine`` behind it, its log in the run directory."""
    from openforgerl.rollout.proxy.config import ProxyConfig
    from openforgerl.rollout.proxy.server import build_app

    settings, token = config.proxy, secrets.token_urlsafe(24)
    data_dir = Path(config.run_dir or "runs/verl") / "proxy"
    proxy_config = ProxyConfig(host=settings.host, port=settings.port, admin_token=token, model=config.model,
                               tool_parser=tool_parser, data_dir=data_dir, force_tool_calls=settings.force_tool_calls,
                               max_tokens=settings.max_tokens, max_context_tokens=settings.max_context_tokens)
    app = build_app(proxy_config, template=template, engine=engine)
    proxy: RolloutProxy | None = None
    try:
        server, serving, port = await listen(app, settings.host, settings.port)
        handle = RoutedHandle(f"http://{settings.host}:{port}", token, data_dir, engine=engine)
        proxy = RolloutProxy(app, handle, settings.host)
        proxy.listeners.append((server, serving, port))
        yield proxy
    finally:
        if proxy is not None:
            await proxy.handle.close()
            for server, serving, _ in proxy.listeners:
                server.should_exit = True
                await serving
        await app.service.aclose()


def segment_outputs(trajectory: Mapping[str, Any], result: RolloutResult, *, prompt_length: int, response_length: int,
                    logprobs: bool = True, stats: CallStats | None = None) -> list[AgentLoopOutput]:
    """The recorded segments as veRL rows: responses cut to ``response_length``, segments whose prompt
    exceeds ``prompt_length`` (or with no model token left) dropped; the reward on the last row."""
    kept: list[tuple[int, dict[str, Any], int]] = []
    for index, segment in enumerate(trajectory.get("segments") or []):
        if len(segment["prompt_ids"]) > prompt_length:
            continue
        cut = max(0, len(segment["response_ids"]) - response_length)
        if 1 not in segment["response_mask"][:response_length]:
            continue
        kept.append((index, segment, cut))
    if not kept:
        log.warning("rollout %s recorded no segment that fits prompt_length=%d (or no model token)",
                    result.rollout_id, prompt_length)
        return []
    reward = float(result.reward) if result.reward is not None else 0.0
    common = _common_fields(trajectory, result, stats, kept=len(kept))
    metrics = _metrics(trajectory, result, stats)
    outputs = []
    for index, segment, cut in kept:
        fields = {**common, "forge_segment": index, "forge_truncated_tokens": cut,
                  "reward_extra_info": dict(common["reward_extra_info"])}
        outputs.append(AgentLoopOutput(
            prompt_ids=list(segment["prompt_ids"]), response_ids=list(segment["response_ids"][:response_length]),
            response_mask=list(segment["response_mask"][:response_length]),
            response_logprobs=[float(x) for x in segment["logprobs"][:response_length]] if logprobs else None,
            num_turns=2 * len(segment.get("calls") or [1]), metrics=metrics, extra_fields=fields))
    outputs[-1].reward_score = reward
    return outputs


def _common_fields(trajectory: Mapping[str, Any], result: RolloutResult, stats: CallStats | None,
                   kept: int) -> dict[str, Any]:
    """The same keys on every row of every rollout (veRL stacks ``extra_fields`` across rows)."""
    segments = len(trajectory.get("segments") or [])
    fields: dict[str, Any] = {
        "reward_extra_info": {"success": float(result.status == "success"),
                              "agent_timeout": float(result.status == "agent_timeout")},
        "forge_rollout_id": result.rollout_id, "forge_task": result.task, "forge_harness": result.harness,
        "forge_status": result.status, "forge_segments": kept, "forge_dropped_segments": segments - kept,
        "forge_model_calls": len(trajectory.get("calls") or []),
        "forge_harness_s": float(result.timings.get("harness_s", 0.0)),
        "forge_verifier_s": float(result.timings.get("verifier_s", 0.0)),
        "forge_total_s": float(result.timings.get("total_s", 0.0)),
    }
    if stats is not None and stats.min_global_steps is not None:  # veRL's staleness tags read these two
        fields["min_global_steps"] = stats.min_global_steps
    if stats is not None and stats.max_global_steps is not None:
        fields["max_global_steps"] = stats.max_global_steps
    return fields


def _metrics(trajectory: Mapping[str, Any], result: RolloutResult, stats: CallStats | None) -> AgentLoopMetrics:
    """veRL's timing columns: model time as ``generate_sequences``, the rest of the rollout (sandbox,
    harness, verifier) as ``tool_calls``."""
    model_s = float((trajectory.get("timings") or {}).get("engine_ms", 0.0)) / 1000
    total_s = float(result.timings.get("total_s", 0.0))
    preempted = stats.preempted if stats is not None and stats.calls else -1
    return AgentLoopMetrics(generate_sequences=model_s, tool_calls=max(0.0, total_s - model_s),
                            num_preempted=preempted)


def zero_singleton_groups(response_mask: torch.Tensor, uids: Sequence[Hashable],
                          sessions: Sequence[Hashable] | None = None) -> torch.Tensor:
    """``response_mask`` with the rows of every GRPO group that has one surviving member zeroed.

    A group is the rows sharing a uid; a member is a session (veRL's V1 row key is
    ``{uid}_{session}_{index}``: ``key.rsplit("_", 2)`` gives both); ``sessions`` None: each row its own
    member. With one member left (the others were infra failures and left the group), GRPO would
    use mean 0 / std 1 and the lone rollout's raw reward would become its advantage; zeroing its mask
    keeps it out of the gradient instead. Apply it to the batch before advantages and the loss (the CPU
    GRPO backend does; stock veRL 0.9.1 has no hook for it and trains on the raw reward)."""
    members: dict[Hashable, set[Hashable]] = {}
    for row, uid in enumerate(uids):
        members.setdefault(uid, set()).add(sessions[row] if sessions is not None else row)
    lonely = [row for row, uid in enumerate(uids) if len(members[uid]) == 1]
    mask = response_mask.clone()
    if lonely:
        mask[lonely] = 0
    return mask
