"""forge serve (start/stop the policy model server) and forge chat (one request, with token ids and logprobs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from openforgerl.cli import cli

if TYPE_CHECKING:
    from openforgerl.serving.chat import ChatReply


@cli.command()
@click.option("--model", "model_name", default="smollm2", show_default=True,
              help="Known model to serve, or a checkpoint directory forge train wrote (checkpoints/step-K).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="TCP port.")
@click.option("--dtype", default=None, help="Override the dtype (default: float32 on CPU, vLLM's choice on GPU).")
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True)
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, help="Seconds to wait for /health.")
@click.option("--max-model-len", type=click.IntRange(256), default=None,
              help="Context length in tokens (default: the model's, 8192 for smollm2).")
@click.option("--cpu-threads-bind", default=None, metavar="CPUS",
              help="CPU only: the CPUs vLLM computes on ('0-3', or 'auto': vLLM's choice, which keeps one core "
                   "for its API server). Default: all of them on a machine with at most 4 CPUs, else auto.")
@click.option("--stop", is_flag=True, help="Stop the server forge started, and exit.")
@click.option("--weights", default=None, metavar="MODEL|CHECKPOINT",
              help="Load these weights into the running server in place, and exit: a checkpoint forge train wrote, "
                   "or a known model (back to its pulled weights). Same base model only.")
def serve(model_name: str, host: str, port: int, dtype: str | None, device: str, timeout_s: float,
          max_model_len: int | None, cpu_threads_bind: str | None, stop: bool, weights: str | None) -> None:
    """Serve a model with vLLM in the background; print its OpenAI base URL once healthy."""
    from openforgerl.models.registry import model_spec
    from openforgerl.serving import vllm

    if weights is not None:
        _load_weights(weights)
        return
    if stop:
        record = vllm.stop()
        click.echo(f"stopped {record.model} at {record.url} (pid {record.pid})" if record
                   else "no vLLM server started by forge is running", err=True)
        return
    model_spec(model_name)  # an unknown name or a path that is no checkpoint fails before anything starts
    config = vllm.VllmConfig(model=model_name, host=host, port=port, dtype=dtype, device=device,
                             startup_timeout_s=timeout_s, max_model_len=max_model_len,
                             cpu_threads_bind=cpu_threads_bind)
    click.echo(f"serving {model_name} (log: {vllm.log_path()}) ...", err=True)
    result = vllm.serve(config)
    how = f"started in {result.seconds:.0f} s" if result.started else "already serving"
    click.echo(f"{model_name}: {how}", err=True)
    click.echo(result.url)


def _load_weights(weights: str) -> None:
    from openforgerl.errors import UserError
    from openforgerl.models.registry import model_spec, resolve_model
    from openforgerl.serving import vllm

    record = vllm.running_server()
    if record is None:
        raise UserError("--weights loads into a running server, and forge serves none",
                        fix="start one first: forge serve --model smollm2")
    spec, directory = resolve_model(weights)
    served = model_spec(record.model)
    if spec.name != served.name:
        raise UserError(f"--weights {weights} is a {spec.name} model and the server serves {served.name}",
                        fix=f"give weights of {served.name}, or restart: "
                            f"forge serve --stop && forge serve --model {weights}")
    seconds = vllm.reload_weights(record.url, directory)
    click.echo(f"{record.url}: now serving the weights of {weights} (loaded in {seconds:.1f} s)", err=True)
    click.echo(record.url)


@cli.command()
@click.argument("prompt")
@click.option("--base-url", default=None, help="OpenAI base URL (default: the server forge serve started).")
@click.option("--model", "model_name", default="smollm2", show_default=True, help="Served model name.")
@click.option("--tool-choice", default=None, help="auto, none, required, or a tool name (forces that tool).")
@click.option("--tool-spec", type=click.Path(dir_okay=False), default=None,
              help="JSON file with the tools to offer (default with --tool-choice: a write_file tool).")
@click.option("--max-tokens", default=48, show_default=True, type=click.IntRange(1))
def chat(prompt: str, base_url: str | None, model_name: str, tool_choice: str | None, tool_spec: str | None,
         max_tokens: int) -> None:
    """Send PROMPT as one chat completion; print the reply, its token ids and per-token logprobs."""
    from openforgerl.serving import chat as chat_core
    from openforgerl.serving.vllm import VllmConfig, running_server

    tools = chat_core.load_tools(tool_spec) if tool_spec else ([chat_core.WRITE_FILE_TOOL] if tool_choice else None)
    body = chat_core.chat_request(model_name, prompt, tools=tools, max_tokens=max_tokens,
                                  tool_choice=chat_core.tool_choice_value(tool_choice, tools or []))
    record = running_server()
    url = base_url or (record.url if record else VllmConfig().base_url)
    _print_reply(chat_core.send_chat(url, body))


def _print_reply(reply: ChatReply) -> None:
    import json

    from rich.console import Console
    from rich.table import Table

    click.echo(reply.text)
    for call in reply.tool_calls:
        function = call.get("function", {})
        click.echo(f"tool call: {function.get('name')}({function.get('arguments')})")
    click.echo(f"finish reason: {reply.finish_reason}")
    if reply.finish_reason == "length" and "<tool_call>" in reply.text:
        click.echo("note: the reply stopped at --max-tokens (a tool call cut short is not parsed)", err=True)
    click.echo(f"prompt token ids ({len(reply.prompt_token_ids)}): {json.dumps(reply.prompt_token_ids)}")
    click.echo(f"token ids ({len(reply.token_ids)}): {json.dumps(reply.token_ids)}")
    table = Table("#", "token id", "token", "logprob")
    for index, (token_id, token, logprob) in enumerate(zip(reply.token_ids, reply.tokens, reply.logprobs, strict=True)):
        table.add_row(str(index), str(token_id), repr(token), f"{logprob:.5f}" if logprob is not None else "-")
    Console(width=100).print(table)
