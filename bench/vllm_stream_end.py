"""How long after its last token real vLLM ends a streamed answer: the wait the proxy no longer makes.

A streamed ``/v1/completions`` answer from vLLM ends with the chunk that carries ``finish_reason``, then
``data: [DONE]`` and the chunked body's end, written separately. The proxy's engine stream used to read on to
the body's end before the call could be recorded and answered; it now ends at the last token (``Response.drain``
reads the rest off the call's path). This measures that gap against real vLLM: per call, the time from the
chunk with ``finish_reason`` reaching the engine stream to the read that brings the body's end, and whether the
end came in a read of its own.

Needs vLLM serving SmolLM2 (``forge serve --model smollm2``; it starts one or reuses a running one).
Run: .venv/bin/python bench/vllm_stream_end.py [--calls 40] [--out bench/results/proxy.md]. Only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proxy import pct, write_section  # noqa: E402

BEGIN, END = "<!-- vllm-stream-end:begin -->", "<!-- vllm-stream-end:end -->"


async def measure(base_url: str, calls: int, max_tokens: int) -> list[tuple[float, bool]]:
    """Per call: ms from the last token's chunk to the read with the body's end (negative: it came first), and
    whether that end came in a read of its own."""
    from openforgerl.rollout.proxy import http_client
    from openforgerl.rollout.proxy.conversation import Sampling
    from openforgerl.rollout.proxy.engine import VLLMEngineConfig
    from openforgerl.rollout.proxy.engines.vllm import VLLMEngine

    reads: list[tuple[float, bytes]] = []
    feed = http_client._Connection.data_received

    def noted(self, data: bytes) -> None:
        reads.append((time.perf_counter(), data))
        feed(self, data)

    http_client._Connection.data_received = noted  # type: ignore[method-assign]
    engine = VLLMEngine(VLLMEngineConfig(base_url=base_url, model="smollm2"))
    out: list[tuple[float, bool]] = []
    try:
        for i in range(calls + 2):  # the first two warm the connection and vLLM
            reads.clear()
            last_token = 0.0
            async for chunk in engine.stream([1, 2, 3, 4 + i % 50], Sampling(max_tokens=max_tokens, temperature=0)):
                if chunk.finish_reason is not None:
                    last_token = time.perf_counter()
            for _ in range(200):  # the rest is read off the stream's path: wait until it is in
                if reads and reads[-1][1].endswith(b"0\r\n\r\n"):
                    break
                await asyncio.sleep(0.005)
            end = next(t for t, data in reversed(reads) if data.endswith(b"0\r\n\r\n"))
            alone = not any(b"finish_reason" in data and b'"finish_reason":null' not in data
                            for _, data in reads if data.endswith(b"0\r\n\r\n"))
            if i >= 2:
                out.append(((end - last_token) * 1000, alone))
    finally:
        http_client._Connection.data_received = feed  # type: ignore[method-assign]
        await engine.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--out", help="replace this section in that markdown file")
    args = parser.parse_args()
    served = subprocess.run([sys.executable, "-m", "openforgerl", "serve", "--model", "smollm2"],
                            capture_output=True, text=True, timeout=900, check=True)
    base_url = served.stdout.strip().splitlines()[-1].removesuffix("/v1")
    got = asyncio.run(measure(base_url, args.calls, args.max_tokens))
    gaps = sorted(g for g, alone in got if alone) or [0.0]  # the calls that waited for a read of their own
    saved = sum(max(g, 0.0) for g, _ in got) / len(got)
    lines = ["## vLLM's answer ends after its last token: the wait the proxy no longer makes", "",
             f"`bench/vllm_stream_end.py --calls {args.calls}`: real vLLM (CPU) serving SmolLM2, `/v1/completions` "
             f"streamed, {args.max_tokens} tokens greedy, one call at a time through forge's engine client. Per call: "
             "ms from the chunk with `finish_reason` reaching the engine stream to the read that brings `[DONE]` and "
             "the body's end (before `Response.drain`, the call waited for that read before its record and the "
             "answer's end).", "",
             "| calls | end in a read of its own | its gap p50 ms | p90 ms | max ms | wait saved per call, mean ms |",
             "|---:|---:|---:|---:|---:|---:|",
             f"| {len(got)} | {sum(alone for _, alone in got)} | {statistics.median(gaps):.3f} | {pct(gaps, 90):.3f} | "
             f"{gaps[-1]:.3f} | {saved:.3f} |"]
    if args.out:
        write_section(Path(args.out), BEGIN, END, lines)
    else:
        print("\n".join([BEGIN, *lines, END]))


if __name__ == "__main__":
    main()
