"""Proxy storage per rollout: bytes of the rollout log vs the raw request + response JSON, for extending and for
forking traffic, with forked segments stored as a reference to the ids they share (now) and stored whole (the
baseline, measured in the same run by turning the sharing off).

Traffic: a Codex-sized rollout (17 kB system prompt, 9 tools, 10 non-streamed calls) through the real proxy app
in-process (the pulled model's chat template and tokenizer, a scripted engine). Extending: each call resends the
history plus the last answer and a tool output. Forking: each call resends the same body (what OpenClaw does on
its chat wires, and any retry), so no call extends another.

Goal (issue 15): stored bytes <= 0.25x the raw JSON for extending and for forking traffic.

Run: .venv/bin/python bench/proxy_storage.py   Writes bench/results/proxy_storage.md.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openforgerl.rollout.proxy import lineage  # noqa: E402
from openforgerl.rollout.proxy.engine import ScriptTurn  # noqa: E402
from openforgerl.testing.proxy import PATHS, InProcessProxy, policy_template  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "description": "does things " * 20,
                                           "parameters": {"type": "object", "properties": {
                                               "arg": {"type": "string", "description": "an argument"}}}}}
         for i in range(9)]
ANSWER = ScriptTurn(text="I will look at the files first, then write hello.txt with the content asked for.")


async def rollout(proxy: InProcessProxy, forking: bool, calls: int = 10) -> tuple[int, int]:
    messages = [{"role": "system", "content": "You are a coding agent. " * 700},
                {"role": "user", "content": "create a file hello.txt containing hi"}]
    raw = 0
    async with proxy.client() as client:
        rollout_id, token = await proxy.new_rollout(client)
        for call in range(calls):
            body = orjson.dumps({"model": "smollm2", "messages": messages, "tools": TOOLS})
            answer = await client.post(PATHS["chat"], content=body, headers={
                "authorization": f"Bearer {token}", "content-type": "application/json"})
            raw += len(body) + len(answer.content)
            if not forking:
                messages = messages + [answer.json()["choices"][0]["message"],
                                       {"role": "user", "content": f"output of step {call}: " + "log line\n" * 40}]
    stored = (proxy.data_dir / "rollouts" / f"{rollout_id}.log").stat().st_size
    return raw, stored


def main() -> None:
    template = policy_template()
    rows = []
    for traffic in ("extending", "forking"):
        for sharing in (True, False):
            lineage.MIN_SHARED = 32 if sharing else 10 ** 9
            proxy = InProcessProxy([ANSWER], template=template)
            raw, stored = asyncio.run(rollout(proxy, traffic == "forking"))
            rows.append((traffic, sharing, raw, stored))
            print(traffic, sharing, raw, stored, f"{stored / raw:.3f}", flush=True)
    lineage.MIN_SHARED = 32
    lines = ["# Proxy storage per rollout", "",
             f"Machine: {time.strftime('%Y-%m-%d')}. One run of `bench/proxy_storage.py`: a Codex-sized rollout (17 kB "
             "system prompt, 9 tools, 10 calls) through the proxy app in-process with SmolLM2's chat template and "
             "tokenizer and a scripted engine. Forked segments stored by reference (now) vs whole (the baseline, "
             "the same run with the sharing turned off).", "",
             "| traffic | forked segments | raw request + response JSON | stored (rollout log) | ratio |",
             "|---|---|---:|---:|---:|"]
    for traffic, sharing, raw, stored in rows:
        lines.append(f"| {traffic} | {'by reference' if sharing else 'whole (baseline)'} | {raw:,} B | {stored:,} B "
                     f"| {stored / raw:.2f}x |")
    fork_now = next(r for r in rows if r[0] == "forking" and r[1])
    fork_before = next(r for r in rows if r[0] == "forking" and not r[1])
    lines += ["", f"Goal: <= 0.25x for extending and forking traffic. Forking: {fork_before[3] / fork_before[2]:.2f}x "
              f"-> {fork_now[3] / fork_now[2]:.2f}x ({fork_before[3] / fork_now[3]:.1f}x fewer bytes)."]
    out = Path(__file__).parent / "results" / "proxy_storage.md"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
