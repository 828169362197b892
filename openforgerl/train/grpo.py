"""One GRPO update on recorded rollouts, with veRL's own algorithm functions (torch + transformers, CPU or GPU).

Key invariants:
* The math is veRL's: the group advantage is ``compute_grpo_outcome_advantage`` (one score per rollout,
  grouped by task), the policy loss is ``get_policy_loss_fn(name)``, aggregation is ``agg_loss`` over the
  whole step's batch (``global_batch_info``, as veRL's FSDP workers set it), the KL is ``kl_penalty``.
  Nothing here re-derives them.
* The tokens trained on are the recorded ones (``prompt_ids + response_ids``), never re-tokenised; only
  mask-1 tokens (what the policy sampled) carry loss. The recorded logprobs are the old policy.
* A rollout's advantage is computed once (from its reward, against its group) and broadcast to every one
  of its segments; a group with a single member carries no gradient (veRL would hand it its raw reward).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass
class Sample:
    """One recorded segment of one rollout: what the update trains on."""

    rollout_id: str
    group: str
    """Rollouts of the same task in the same step (a GRPO group)."""
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    old_logprobs: list[float]
    reward: float
    advantage: float = 0.0


@dataclass
class UpdateSettings:
    policy_loss: str = "vanilla"
    loss_agg_mode: str = "token-mean"
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    kl_coef: float = 0.0
    kl_type: str = "low_var_kl"
    entropy_coeff: float = 0.0
    max_grad_norm: float = 1.0
    norm_adv_by_std: bool = True
    temperature: float = 1.0
    """Logits are divided by it before log_softmax (what the recorded logprobs were computed at)."""
    max_tokens_per_sample: int = 8192


@dataclass
class UpdateResult:
    metrics: dict[str, float] = field(default_factory=dict)
    trained_samples: int = 0


def group_advantages(samples: list[Sample], norm_by_std: bool = True) -> dict[str, Any]:
    """Set ``advantage`` on every sample from veRL's GRPO estimator; return group statistics.

    One score per rollout (its reward) enters the estimator, indexed by group; the scalar it returns is
    broadcast to all of the rollout's segments. Groups of one get advantage 0 (no gradient)."""
    import numpy as np
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rollouts: dict[str, Sample] = {}
    for sample in samples:
        rollouts.setdefault(sample.rollout_id, sample)
    ids = list(rollouts)
    members: dict[str, int] = defaultdict(int)
    for rid in ids:
        members[rollouts[rid].group] += 1
    stats = {"groups": len(members), "singleton_groups": sum(n == 1 for n in members.values()),
             "zero_variance_groups": 0}
    if not ids:
        return stats
    scores = torch.tensor([[rollouts[rid].reward] for rid in ids], dtype=torch.float32)
    mask = torch.ones_like(scores)
    index = np.array([rollouts[rid].group for rid in ids], dtype=object)
    advantages, _ = compute_grpo_outcome_advantage(scores, mask, index, norm_adv_by_std_in_grpo=norm_by_std)
    per_rollout = {rid: float(advantages[i, 0]) for i, rid in enumerate(ids)}
    rewards_by_group: dict[str, set[float]] = defaultdict(set)
    for rid in ids:
        rewards_by_group[rollouts[rid].group].add(rollouts[rid].reward)
    stats["zero_variance_groups"] = sum(len(v) == 1 and members[g] > 1 for g, v in rewards_by_group.items())
    for sample in samples:
        alone = members[sample.group] == 1
        sample.advantage = 0.0 if alone else per_rollout[sample.rollout_id]
    return stats


def actor_config(settings: UpdateSettings, group_size: int) -> Any:
    from verl.workers.config import ActorConfig
    from verl.workers.config.actor import PolicyLossConfig

    return ActorConfig(strategy="fsdp", rollout_n=max(1, group_size), ppo_micro_batch_size_per_gpu=1,
                       clip_ratio_low=settings.clip_ratio_low, clip_ratio_high=settings.clip_ratio_high,
                       loss_agg_mode=settings.loss_agg_mode, entropy_coeff=settings.entropy_coeff,
                       policy_loss=PolicyLossConfig(loss_mode=settings.policy_loss))


def response_logprobs(model: Any, sample: Sample, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities (and entropies) the model gives the sample's response tokens, teacher-forced."""
    import torch
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    ids = torch.tensor([sample.prompt_ids + sample.response_ids], dtype=torch.long)
    logits = model(input_ids=ids).logits[0].float()
    n_prompt, n_response = len(sample.prompt_ids), len(sample.response_ids)
    # position t predicts token t+1: the response tokens are predicted by positions [n_prompt-1, end-1)
    logits = logits[n_prompt - 1:n_prompt - 1 + n_response] / temperature
    targets = ids[0, n_prompt:n_prompt + n_response]
    return logprobs_from_logits(logits, targets), entropy_from_logits(logits)


def grpo_update(model: Any, optimizer: Any, samples: list[Sample], settings: UpdateSettings, *,
                group_size: int, reference: Any = None) -> UpdateResult:
    """One optimizer step over ``samples`` (advantages already set): micro-batches of one sample,
    gradients accumulated, the loss aggregated over the step's whole batch as veRL does."""
    import torch
    from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty

    started = time.monotonic()
    trainable = [s for s in samples if s.advantage != 0.0 and any(s.response_mask)]
    trainable = [s for s in trainable if len(s.prompt_ids) + len(s.response_ids) <= settings.max_tokens_per_sample]
    result = UpdateResult(trained_samples=len(trainable))
    config = actor_config(settings, group_size)
    batch_tokens = sum(sum(s.response_mask) for s in trainable)
    config.global_batch_info.update({"batch_num_tokens": max(1, batch_tokens),
                                     "global_batch_size": max(1, len(trainable)), "dp_size": 1})
    loss_fn = get_policy_loss_fn(settings.policy_loss)
    totals: dict[str, float] = defaultdict(float)
    weights: dict[str, float] = defaultdict(float)
    mismatch_abs, mismatch_n, mismatch_max = 0.0, 0, 0.0
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for sample in trainable:
        mask = torch.tensor([sample.response_mask], dtype=torch.float32)
        old = torch.tensor([sample.old_logprobs], dtype=torch.float32)
        advantages = torch.full_like(mask, sample.advantage) * mask
        logprobs, entropy = response_logprobs(model, sample, settings.temperature)
        logprobs, entropy = logprobs.unsqueeze(0), entropy.unsqueeze(0)
        pg_loss, pg_metrics = loss_fn(old_log_prob=old, log_prob=logprobs, advantages=advantages,
                                      response_mask=mask, loss_agg_mode=settings.loss_agg_mode, config=config)
        loss = pg_loss
        share = float(mask.sum()) / max(1, batch_tokens)
        if settings.entropy_coeff:
            loss = loss - settings.entropy_coeff * agg_loss(entropy, mask, settings.loss_agg_mode,
                                                            **config.global_batch_info)
        if reference is not None and settings.kl_coef:
            with torch.no_grad():
                ref_logprobs, _ = response_logprobs(reference, sample, settings.temperature)
            kl = kl_penalty(logprobs, ref_logprobs.unsqueeze(0), settings.kl_type)
            kl_loss = agg_loss(kl, mask, settings.loss_agg_mode, **config.global_batch_info)
            loss = loss + settings.kl_coef * kl_loss
            totals["kl"] += float(kl_loss.detach())
        loss.backward()
        totals["loss"] += float(loss.detach())
        for key, value in pg_metrics.items():
            name = key.split("/")[-1]
            totals[name] += float(value) * share
            weights[name] += share
        with torch.no_grad():
            masked = mask.bool()
            totals["entropy"] += float(entropy[masked].sum())
            diff = (logprobs.detach() - old)[masked].abs()
            if diff.numel():
                mismatch_abs += float(diff.sum())
                mismatch_n += diff.numel()
                mismatch_max = max(mismatch_max, float(diff.max()))
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)) if trainable else 0.0
    if trainable and math.isfinite(grad_norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    metrics = {"loss": totals["loss"], "grad_norm": grad_norm,
               "clip_frac": totals["pg_clipfrac"] / weights["pg_clipfrac"] if weights["pg_clipfrac"] else 0.0,
               "ppo_kl": totals["ppo_kl"] / weights["ppo_kl"] if weights["ppo_kl"] else 0.0,
               "kl": totals["kl"], "entropy": totals["entropy"] / max(1, batch_tokens),
               "logprob_mismatch_mean": mismatch_abs / max(1, mismatch_n), "logprob_mismatch_max": mismatch_max,
               "trained_tokens": float(batch_tokens), "update_s": time.monotonic() - started}
    result.metrics = metrics
    return result
