"""forge train --backend local end to end: real react rollouts on vLLM CPU (SmolLM2), two GRPO steps with
veRL's functions, checkpoints, and the new weights loaded into the running server before the next rollouts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest

from openforgerl.models.registry import require_pulled, resolve_model
from openforgerl.serving.vllm import VllmConfig, reload_weights, server_command
from openforgerl.testing.tasks import write_task
from openforgerl.train.local import LocalTrainConfig, LocalTrainer

pytestmark = [pytest.mark.docker, pytest.mark.model]

# The reward is drawn at random in [0, 1] by the verifier: every group has spread, so every step trains
# (this test is about the machinery; bench/train_cpu.py is about learning).
RANDOM_REWARD_SH = """#!/bin/bash
r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
printf '{"reward": %s}\\n' "$(awk -v r="$r" 'BEGIN { printf "%.4f", r / 65535 }')" > /logs/verifier/reward.json
"""
PROBE = "The capital of France is"


def probe_logprobs(base_url: str) -> list[float]:
    answer = httpx.post(f"{base_url}/completions", timeout=120, json={
        "model": "smollm2", "prompt": PROBE, "max_tokens": 4, "temperature": 0, "logprobs": 1}).json()
    return answer["choices"][0]["logprobs"]["token_logprobs"]


@pytest.fixture
def restored_server(vllm_base_url: str):
    """The session's server goes back to the pulled weights afterwards: other tests share it."""
    yield vllm_base_url
    reload_weights(vllm_base_url, require_pulled("smollm2"))


def test_two_grpo_steps_on_real_rollouts_change_the_served_policy(tmp_path: Path, restored_server: str):
    base_url = restored_server
    task = write_task(tmp_path / "tasks", "coin", test_sh=RANDOM_REWARD_SH, agent_timeout=180)
    before = probe_logprobs(base_url)
    config = LocalTrainConfig(
        tasks=[str(task)], harness="react", steps=2, group_size=3, out=str(tmp_path / "out"), lr=1e-4,
        server_url=base_url,
        harness_options={"tool_choice": "required", "max_turns": 1, "max_tokens": 24, "temperature": 1.0},
        rollout={"concurrency": 3, "proxy": {"engine": {"type": "vllm", "base_url": base_url.removesuffix("/v1")}}})
    history = LocalTrainer(config).run()

    assert [m["step"] for m in history] == [0, 1]
    lines = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1]
    for m in history:
        assert m["success"] + m["failure"] + m["agent_timeout"] >= 2, m
        assert m["trained_samples"] > 0 and m["trained_tokens"] > 0
        assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) and m["grad_norm"] > 0
        # the recorded logprobs are the old policy: vLLM fp32 and the torch forward agree closely
        assert m["logprob_mismatch_mean"] < 0.05, m
        # after each sync the server runs exactly the trained weights (fp32 on both sides)
        assert m["served_mismatch"] < 1e-3, m
        assert (tmp_path / "out" / "rollouts" / f"step-{m['step']}" / "rollouts.jsonl").is_file()
    # step 1 was rolled out on the weights step 0 produced: its recorded logprobs match them, not the originals
    checkpoint = Path(history[-1]["checkpoint"])
    assert checkpoint.name == "step-1" and (checkpoint / "model.safetensors").is_file()

    from safetensors.torch import load_file

    original = load_file(str(require_pulled("smollm2") / "model.safetensors"))
    trained = load_file(str(checkpoint / "model.safetensors"))
    changed = [name for name in trained if not (trained[name] == original[name]).all()]
    assert changed, "no weight changed after two GRPO steps"

    # the server now serves the last checkpoint: a fixed prompt's logprobs moved, and they are the checkpoint's
    after = probe_logprobs(base_url)
    assert max(abs(a - b) for a, b in zip(after, before)) > 1e-4
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    answer = httpx.post(f"{base_url}/completions", timeout=120, json={
        "model": "smollm2", "prompt": PROBE, "max_tokens": 4, "temperature": 0, "logprobs": 1,
        "return_tokens_as_token_ids": True}).json()["choices"][0]
    ids = [int(t.split(":")[-1]) for t in answer["logprobs"]["tokens"]]
    prompt = tokenizer(PROBE)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0]
    local = torch.log_softmax(logits[len(prompt) - 1:-1], -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
    assert max(abs(float(a) - b) for a, b in zip(local, answer["logprobs"]["token_logprobs"])) < 1e-3

    # the checkpoint is what forge serve --model PATH serves (same base name, weights from the checkpoint)
    spec, weights = resolve_model(str(checkpoint))
    assert spec.name == "smollm2" and weights == checkpoint.resolve()
    command = server_command(VllmConfig(model=str(checkpoint)), "cpu")
    assert str(checkpoint.resolve()) in command and command[command.index("--served-model-name") + 1] == "smollm2"

    # a rerun with the same --out resumes after the last step instead of redoing it
    assert LocalTrainer(config).run() == lines


def test_an_unbuilt_image_is_one_line_before_any_rollout(tmp_path: Path, vllm_base_url: str):
    from openforgerl.errors import ForgeError

    missing = "127.0.0.1:5000/forge/never-built@sha256:" + "0" * 64
    task = write_task(tmp_path / "tasks", "unbuilt", image=missing, dockerfile=None)
    config = LocalTrainConfig(tasks=[str(task)], steps=1, group_size=2, out=str(tmp_path / "out"),
                              server_url=vllm_base_url)
    with pytest.raises(ForgeError) as caught:
        LocalTrainer(config).run()
    assert "never-built" in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "out" / "rollouts").exists()
