"""``forge train --backend verl``: the ``verl.trainer.main_ppo`` command line, checked before it runs.

veRL is configured by Hydra: a config file (ours in ``presets/`` put ``ppo_trainer`` first in their
defaults) plus ``key=value`` overrides. Key invariant: an override naming a key that veRL's composed
config does not have is refused here, in one line naming the key and the fix, instead of minutes later
inside a Ray job; ``++key=value`` (add or set) and ``+key=value`` (add) are the ways to mean a new key.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openforgerl.errors import ConfigError
from openforgerl.stack.gpu import GpuPart
from openforgerl.stack.part import Part, PartStatus

PRESETS = Path(__file__).parent / "presets"
DEFAULT_PRESET = "grpo_one_harness"
AGENT_LOOPS = PRESETS / "agent_loops.yaml"
AGENT_LOOP_KEY = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
VERL_VERSION = "0.9.1"
"""The veRL version these presets and the agent loop were written and tested against."""
TRAINING_MODULES = ("ray", "tensordict", "hydra", "omegaconf", "torch", "transformers", "vllm", "transfer_queue",
                    "torchdata", "peft")
"""What ``verl.trainer.main_ppo`` imports on its way to a GPU run (veRL's own deps, some undeclared)."""


def resolve_config(config: Path | str | None) -> Path:
    """A config file, or a preset's name (``grpo_one_harness``, ``grpo_multi_harness``); None: the default preset."""
    if config is None:
        return PRESETS / f"{DEFAULT_PRESET}.yaml"
    path = Path(config)
    if path.is_file():
        return path.resolve()
    preset = PRESETS / f"{path.name.removesuffix('.yaml')}.yaml"
    if preset.is_file() and path.parent == Path("."):
        return preset
    known = ", ".join(sorted(p.stem for p in PRESETS.glob("grpo_*.yaml")))
    raise ConfigError(f"no veRL config {config}", fix=f"pass a Hydra config file, or a preset: {known}")


def verl_command(config: Path | None, overrides: list[str], python: str | None = None) -> list[str]:
    """``python -m verl.trainer.main_ppo --config-path DIR --config-name NAME *overrides``; the agent-loop
    YAML that registers ``forge_agent`` is passed by absolute path unless an override sets it."""
    path = resolve_config(config)
    extra = [] if any(_key(o) == AGENT_LOOP_KEY for o in overrides) else [f"{AGENT_LOOP_KEY}={AGENT_LOOPS}"]
    return [python or sys.executable, "-m", "verl.trainer.main_ppo", "--config-path", str(path.parent),
            "--config-name", path.stem, *extra, *overrides]


def check_overrides(config: Path | None, overrides: Sequence[str]) -> None:
    """Raise ConfigError (one line: the key, and the fix) for an override veRL's config has no key for.

    The config is composed with Hydra from the file (its defaults pull in veRL's packaged
    ``verl/trainer/config``), offline, without the overrides; each plain ``key=value`` must name a key
    there. ``+``/``++``/``~`` overrides, ``hydra.*`` and config-group choices (``model_engine=...``) pass."""
    tree = compose(config)
    for override in overrides:
        if "=" not in override:
            raise ConfigError(f"-o {override}: not key=value", fix="write overrides as key.path=value")
        key = _key(override)
        if override.startswith(("+", "~")) or key.startswith("hydra.") or "@" in key or _is_group(key):
            continue
        missing = _missing_part(tree, key.split("."))
        if missing is not None:
            parent, part, siblings = missing
            near = difflib.get_close_matches(part, siblings, n=1)
            hint = f"did you mean {'.'.join([*parent, near[0]])}? else " if near else ""
            raise ConfigError(f"-o {key}: veRL's config has no key {part!r}" + (f" under {'.'.join(parent)}"
                                                                                  if parent else ""),
                              fix=f"{hint}add it as a new key with ++{override}")


def compose(config: Path | None) -> dict[str, Any]:
    """The composed config as plain data (interpolations left unresolved), without overrides."""
    try:
        from hydra import compose as hydra_compose
        from hydra import initialize_config_dir
        from hydra.errors import HydraException
        from omegaconf import OmegaConf
    except ImportError as exc:
        raise ConfigError("checking veRL overrides needs hydra-core", fix='pip install "openforgerl[train]"') from exc
    if importlib.util.find_spec("verl") is None:
        raise ConfigError("veRL is not installed",
                          fix=f'pip install "verl[vllm]=={VERL_VERSION}" (see docs/training.md)')
    path = resolve_config(config)
    try:
        with initialize_config_dir(config_dir=str(path.parent), version_base=None):
            composed = hydra_compose(config_name=path.stem)
    except HydraException as exc:
        raise ConfigError(f"veRL config {path} does not compose: {' '.join(str(exc).split())[:300]}",
                          fix="fix the file (its defaults must start with ppo_trainer, from "
                              "hydra.searchpath pkg://verl.trainer.config)") from exc
    tree = OmegaConf.to_container(composed, resolve=False)
    assert isinstance(tree, dict)
    return {str(key): value for key, value in tree.items()}


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _is_group(key: str) -> bool:
    """A config-group choice (``model_engine=megatron``): a directory of veRL's config tree."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    return "." not in key and (root / key).is_dir()


def _missing_part(tree: Any, parts: list[str]) -> tuple[list[str], str, list[str]] | None:
    """Where ``parts`` leaves ``tree``: (the path that exists, the first missing part, its siblings)."""
    node = tree
    for depth, part in enumerate(parts):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            siblings = [str(k) for k in node] if isinstance(node, dict) else []
            return parts[:depth], part, siblings
    return None


def verl_status() -> PartStatus:
    return VerlPart().check()


class VerlPart(Part):
    """veRL for ``forge train --backend verl``: installed at the tested version, its imports present,
    and a GPU (veRL cannot train on CPU). Optional: rollouts and the CPU backend need none of it."""

    name = "verl"
    optional = True

    def check(self) -> PartStatus:
        fix = f'pip install "verl[vllm]=={VERL_VERSION}" in a GPU environment (docs/training.md)'
        try:
            version = importlib.metadata.version("verl")
        except importlib.metadata.PackageNotFoundError:
            return self.status(False, "veRL is not installed", fix=fix)
        missing = [name for name in TRAINING_MODULES if importlib.util.find_spec(name) is None]
        gpu = GpuPart().check()
        detail = f"verl {version}" + ("" if version == VERL_VERSION else f" (tested: {VERL_VERSION})")
        detail += f"; missing for training: {', '.join(missing)}" if missing else "; training imports present"
        detail += f"; GPU: {gpu.detail}" if gpu.ready else "; no GPU"
        ready = not missing and gpu.ready and version == VERL_VERSION
        return self.status(ready, detail, fix=fix if missing or version != VERL_VERSION else
                           "use a machine with a CUDA GPU for forge train --backend verl")
