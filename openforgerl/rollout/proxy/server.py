"""Assemble the proxy from its config and run it on uvicorn (uvloop + httptools)."""

from __future__ import annotations

from openforgerl.log import get_logger
from openforgerl.rollout.proxy.app import ProxyApp
from openforgerl.rollout.proxy.config import ProxyConfig
from openforgerl.rollout.proxy.engine import Engine, make_engine
from openforgerl.rollout.proxy.rollouts import Registry
from openforgerl.rollout.proxy.service import ProxyService
from openforgerl.rollout.proxy.store import Store
from openforgerl.rollout.proxy.template import ChatTemplate, load_chat_template
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.rollout.trajectory import Trajectory

log = get_logger(__name__)


def build_app(config: ProxyConfig, template: ChatTemplate | None = None, engine: Engine | None = None) -> ProxyApp:
    """The ASGI app for ``config``; recovers the rollouts found in ``config.data_dir``."""
    template = template or load_chat_template(config.model, config.tokenizer)
    parser = make_tool_parser(config.tool_parser)
    engine = engine or make_engine(config.engine, template, parser)
    registry = Registry(template, parser, Store(config.data_dir))
    recovered = registry.recover()
    if recovered:
        log.info("recovered %d rollouts from %s", recovered, config.data_dir)
    service = ProxyService(template, parser, engine, registry, max_inflight=config.max_inflight,
                           force_tool_calls=config.force_tool_calls, max_tokens=config.max_tokens)
    return ProxyApp(service, admin_token=config.admin_token, model=config.model,
                    unknown_model=config.unknown_model, max_body_bytes=config.max_body_bytes)


def recorded_trajectories(config: ProxyConfig) -> list[Trajectory]:
    """Every rollout recorded in ``config.data_dir``, read without writing to it (safe next to a running proxy)."""
    template = load_chat_template(config.model, config.tokenizer)
    registry = Registry(template, make_tool_parser(config.tool_parser), Store(config.data_dir))
    registry.recover(read_only=True)
    rollouts = [registry.get(rollout_id) for rollout_id in [*registry.by_id, *registry.retired]]
    return [r.trajectory for r in rollouts if r is not None]  # None: a log with no events, as recover() skips


def serve(config: ProxyConfig) -> None:
    import uvicorn

    app = build_app(config)
    uvicorn.run(app, host=config.host, port=config.port, loop="uvloop", http="httptools",
                lifespan="on", access_log=False, log_level="warning", timeout_keep_alive=120,
                backlog=4096)
