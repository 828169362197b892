"""The local GRPO backend's pieces on CPU: veRL's advantage over groups of rollouts, one update on a tiny
model, which rollouts enter a group, and bad settings refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from openforgerl.errors import ConfigError, UserError
from openforgerl.models.registry import resolve_model
from openforgerl.rollout.orchestrator import RolloutResult
from openforgerl.train.grpo import Sample, UpdateSettings, group_advantages, grpo_update, response_logprobs
from openforgerl.train.local import LocalTrainConfig, collect_samples


def sample(rollout: str, group: str, reward: float, response=(5, 6, 7), mask=(1, 0, 1)) -> Sample:
    return Sample(rollout, group, [1, 2, 3], list(response), list(mask), [0.0] * len(response), reward)


def test_group_advantage_is_verls_and_is_broadcast_to_every_segment_of_a_rollout():
    samples = [sample("a", "t1", 1.0), sample("a", "t1", 1.0, (8, 9), (1, 1)),  # two segments of one rollout
               sample("b", "t1", 0.0), sample("c", "t2", 1.0)]                   # t2 has a single member
    stats = group_advantages(samples)
    assert [round(s.advantage, 3) for s in samples] == [0.707, 0.707, -0.707, 0.0]
    assert stats == {"groups": 2, "singleton_groups": 1, "zero_variance_groups": 0}
    same = [sample("x", "t", 1.0), sample("y", "t", 1.0)]
    assert group_advantages(same)["zero_variance_groups"] == 1 and all(s.advantage == 0 for s in same)


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def on_policy(model, rollout: str, group: str, reward: float) -> Sample:
    s = sample(rollout, group, reward, response=(4, 9, 11, 2), mask=(1, 1, 0, 1))
    with torch.no_grad():
        s.old_logprobs = response_logprobs(model, s, 1.0)[0].tolist()
    return s


def test_one_update_moves_the_weights_toward_the_rewarded_rollout():
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    good, bad = on_policy(model, "a", "t", 1.0), on_policy(model, "b", "t", 0.0)
    bad.response_ids = [3, 3, 11, 7]
    with torch.no_grad():
        bad.old_logprobs = response_logprobs(model, bad, 1.0)[0].tolist()
    group_advantages([good, bad])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = grpo_update(model, optimizer, [good, bad], UpdateSettings(), group_size=2)
    m = result.metrics
    assert result.trained_samples == 2 and m["trained_tokens"] == 6
    assert math.isfinite(m["loss"]) and m["grad_norm"] > 0
    assert m["logprob_mismatch_mean"] < 1e-5 and m["clip_frac"] == 0.0  # recorded == recomputed: ratio 1
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    with torch.no_grad():
        after_good = response_logprobs(model, good, 1.0)[0]
    sampled = torch.tensor([1.0, 1.0, 0.0, 1.0]).bool()
    assert after_good[sampled].sum() > torch.tensor(good.old_logprobs)[sampled].sum()


def test_no_gradient_when_no_group_has_spread():
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    samples = [on_policy(model, "a", "t", 0.0), on_policy(model, "b", "t", 0.0)]
    group_advantages(samples)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = grpo_update(model, optimizer, samples, UpdateSettings(), group_size=2)
    assert result.trained_samples == 0 and result.metrics["grad_norm"] == 0.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def result(rid: str, status: str, reward: float | None, **sandbox) -> RolloutResult:
    return RolloutResult(rollout_id=rid, task="t", attempt=0, harness="react", status=status, reward=reward,
                         trajectory=f"trajectories/{rid}.json", sandbox=dict(sandbox))


def test_infra_failures_never_enter_a_group_and_tampering_counts_as_zero(tmp_path: Path):
    (tmp_path / "trajectories").mkdir()
    segment = {"prompt_ids": [1], "response_ids": [2, 3], "response_mask": [1, 1], "logprobs": [-0.1, -0.2]}
    for rid in "abcde":
        (tmp_path / "trajectories" / f"{rid}.json").write_text(json.dumps({"segments": [segment]}))
    results = [result("a", "success", 1.0), result("b", "failure", 0.0), result("c", "infra_error", None),
               result("d", "verifier_error", None), result("e", "success", 1.0, tampered=["/usr/bin/x"])]
    samples, counts = collect_samples(tmp_path, results)
    assert [s.rollout_id for s in samples] == ["a", "b", "e"]
    assert [s.reward for s in samples] == [1.0, 0.0, 0.0]
    assert counts["infra_error"] == 1 and counts["verifier_error"] == 1 and counts["tampered"] == 1
    assert counts["rewards"] == [1.0, 0.0, 0.0]


def test_a_truncated_rollout_stays_in_its_group_s_baseline_but_trains_no_token(tmp_path: Path):
    (tmp_path / "trajectories").mkdir()
    segment = {"prompt_ids": [1], "response_ids": [2, 3], "response_mask": [1, 1], "logprobs": [-0.1, -0.2]}
    for rid in "ab":
        (tmp_path / "trajectories" / f"{rid}.json").write_text(json.dumps({"segments": [segment]}))
    cut = result("b", "failure", 0.0)
    cut.truncated = "its token budget is spent (20 of 20 tokens generated)"
    samples, counts = collect_samples(tmp_path, [result("a", "success", 1.0), cut])
    assert [(s.rollout_id, s.reward, s.response_mask) for s in samples] == [("a", 1.0, [1, 1]), ("b", 0.0, [0, 0])]
    assert counts["truncated"] == 1
    group_advantages(samples)
    assert samples[0].advantage > 0  # the full rollout still learns against the truncated one's reward


def test_bad_settings_are_one_line_naming_the_key(tmp_path: Path):
    with pytest.raises(ConfigError, match="update.lr_typo"):
        LocalTrainConfig(update={"lr_typo": 1}).settings()
    with pytest.raises(ConfigError, match="rollout.attempts is set by forge train"):
        LocalTrainConfig(rollout={"attempts": 3}).rollout_config([], tmp_path)
    with pytest.raises(UserError, match="not a forge checkpoint"):
        resolve_model(str(tmp_path))


def test_a_model_that_does_not_fit_is_refused_before_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from openforgerl.train import local

    (tmp_path / "model.safetensors").write_bytes(b"\0" * (1 << 20))
    trainer = local.LocalTrainer(LocalTrainConfig(out=str(tmp_path / "out")))
    monkeypatch.setattr(local, "_available_memory", lambda: 512 << 20)
    with pytest.raises(UserError, match=r"needs about 1\.0 GiB .* 0\.5 GiB is free"):
        trainer._check_memory(tmp_path)
    monkeypatch.setattr(local, "_available_memory", lambda: 8 << 30)
    trainer._check_memory(tmp_path)
