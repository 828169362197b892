#!/usr/bin/env python3
"""forge_verify: evaluate a compiled verifier spec inside the task container and write the reward.

Copied into a task's ``tests/`` by ``openforgerl.verifiers.compile_verifier`` and started by
``tests/test.sh`` as ``python3 -I -S /tests/forge_verify.py`` (stdlib only, Python >= 3.11; no
site-packages, so nothing the agent planted there is imported). Usage::

    forge_verify.py [--spec FILE] [--root DIR] [--out DIR]

``--root`` prefixes every absolute path the spec names (tests run it on the host against a temp
dir); ``--out`` defaults to ROOT/logs/verifier. Invariant: the runner always ends by writing
``OUT/reward.json`` ``{"reward": float, ...metrics}`` — a check that raises counts as failed with
its error in the metrics — and it reads nothing the agent wrote except the state its checks
inspect: any reward file already in OUT is deleted before the checks run.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.dont_write_bytecode = True  # leave no __pycache__ in the task's tests/
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # -I leaves the script's own directory off sys.path

RUNNER_VERSION = 1
SPEC_FILE = "forge_verify.json"
REWARD_FILES = ("reward.json", "reward.txt")

# kind -> (module next to this file, function(spec, ctx) -> (score 0..1, details))
CHECKS = {
    "command": ("forge_state", "check_command"),
    "file_exists": ("forge_state", "check_file_exists"),
    "file_contains": ("forge_state", "check_file_contains"),
    "file_regex": ("forge_state", "check_file_regex"),
    "json_path": ("forge_state", "check_json_path"),
    "sqlite": ("forge_state", "check_sqlite"),
    "http": ("forge_state", "check_http"),
    "dom": ("forge_dom", "check_dom"),
    "test_suite": ("forge_suite", "check_test_suite"),
    "llm_judge": ("forge_judge", "check_llm_judge"),
}


class Context:
    """Where the container's filesystem is (``root``) and what the checks may need from it."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def path(self, container_path: str) -> Path:
        """The host path of an absolute container path (itself when root is /)."""
        if self.root == "/":
            return Path(container_path)
        return Path(self.root + "/" + container_path.lstrip("/"))

    @property
    def env_root(self) -> str:
        """$FORGE_ROOT for commands: empty in the container, the root on the host."""
        return "" if self.root == "/" else self.root


def evaluate(spec: dict, ctx: Context) -> dict:
    """One node of the spec tree -> {"reward": float, ...details}; never raises."""
    started = time.monotonic()
    kind = spec.get("type")
    try:
        if kind in ("all", "any", "weighted"):
            result = _compose(kind, spec, ctx)
        else:
            score, details = _leaf(kind)(spec, ctx)
            result = {"reward": _clamp(score), **details}
    except Exception as exc:  # a crashing check is a failed check, never a missing reward
        result = {"reward": 0.0, "error": _describe(exc)}
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


def _leaf(kind: str | None):
    if kind not in CHECKS:
        raise ValueError(f"unknown check type {kind!r} (runner v{RUNNER_VERSION} knows {sorted(CHECKS)})")
    module, function = CHECKS[kind]
    return getattr(importlib.import_module(module), function)


def _compose(kind: str, spec: dict, ctx: Context) -> dict:
    children = spec.get("checks") or []
    if not children:
        raise ValueError(f"{kind} has no checks")
    results = {}
    for index, child in enumerate(children):
        name = child.get("name") or f"{child.get('type')}_{index + 1}"
        results[name] = evaluate(child, ctx)
    rewards = [r["reward"] for r in results.values()]
    if kind == "all":
        reward = min(rewards)
    elif kind == "any":
        reward = max(rewards)
    else:
        reward = _weighted(rewards, spec)
    return {"reward": reward, "type": kind, "checks": results}


def _weighted(rewards: list[float], spec: dict) -> float:
    weights = spec.get("weights") or [1.0] * len(rewards)
    if len(weights) != len(rewards) or any(w <= 0 for w in weights):
        raise ValueError("weights must be one positive number per check")
    mean = sum(w * r for w, r in zip(weights, rewards, strict=True)) / sum(weights)
    threshold = spec.get("pass_threshold")
    if threshold is None:
        return mean
    return 1.0 if mean >= threshold - 1e-12 else 0.0


def _clamp(score: float | bool) -> float:
    value = float(score)
    if value != value:  # NaN
        raise ValueError("check produced NaN")
    return min(1.0, max(0.0, value))


def _describe(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"[:2000]


def write_reward(out: Path, result: dict) -> Path:
    """Atomically write OUT/reward.json (rename over whatever is there)."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / "reward.json"
    partial = out / f".reward.json.{os.getpid()}"
    partial.write_text(json.dumps(result, indent=1, sort_keys=False, default=str) + "\n")
    os.replace(partial, target)
    return target


def clear_rewards(out: Path) -> None:
    """Remove reward files left in OUT before this run (planted, or from an earlier run)."""
    for name in REWARD_FILES:
        target = out / name
        if target.is_symlink() or target.exists():
            if target.is_dir() and not target.is_symlink():
                raise RuntimeError(f"{target} is a directory; cannot write the reward")
            target.unlink()


def run(spec_file: Path, root: str, out: Path | None) -> dict:
    ctx = Context(root)
    out = out or ctx.path("/logs/verifier")
    clear_rewards(out)
    try:
        raw = spec_file.read_bytes()
        result = evaluate(json.loads(raw), ctx)
        result["spec_sha256"] = hashlib.sha256(raw).hexdigest()
    except Exception as exc:  # an unreadable spec still ends in a (zero) reward
        result = {"reward": 0.0, "error": f"spec {spec_file}: {_describe(exc)}"}
    result["runner_version"] = RUNNER_VERSION
    write_reward(out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=HERE / SPEC_FILE)
    parser.add_argument("--root", default="/")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = run(args.spec, args.root, args.out)
    print(json.dumps({"reward": result["reward"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
