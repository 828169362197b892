"""One rollout's page in ``forge report``: every model call in order, its tokens, tools and verdict.

Per call: its kind and segment (and why a segment started there), the prompt and response tokens
with the response mask coloured (sampled by the policy, or not: tool results, template text, forced
tokens), each policy token's logprob in its ``title``, the tool calls and results from the proxy's
digest, timings and token counts. Then the verifier's output, reward and metrics, and the tail of
the agent's output.

Invariant: the page is bounded whatever the rollout held — at most ``PROMPT_TOKENS`` of a segment's
first prompt (its end), ``RESPONSE_TOKENS`` after it, ``ROLLOUT_TOKENS`` in all, ``LOG_TAIL``
characters of each log, and the digest (bounded by the proxy) — and says what it left out. Token
text needs the policy's tokenizer; without it the digest's texts stand in.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from openforgerl.evaluation.report_html import Html, fmt, h, join, link, note, pre, pretty_json
from openforgerl.evaluation.report_html import text as escape_text

PROMPT_TOKENS = 4000
RESPONSE_TOKENS = 8000
ROLLOUT_TOKENS = 16000
LOG_TAIL = 6000
LOW_LOGPROB = math.log(0.1)
"""Policy tokens sampled with a probability under 10% are marked."""
MAX_GROUP = 4
"""A token that decodes to part of a character is joined with up to this many next ones."""

KIND_CAUSE = {
    "clean": "extends segment {s}: its prompt is that segment so far, exactly, plus the new tokens below.",
    "realigned": "extends segment {s} at a re-tokenised boundary: the history the harness sent back renders the "
                 "model's turn differently from the sampled tokens; the segment keeps the sampled ids and goes on "
                 "after the turn's end.",
    "fork": "starts segment {s} (fork): its prompt did not extend any earlier segment (the harness rewrote or cut "
            "the history, or a concurrent call held that segment's end).",
    "first": "starts segment {s}: the rollout's first call.",
}
STATUS_CAUSE = {
    "engine_error": "engine error: the call got no answer and is in no segment",
    "client_disconnected": "the harness hung up before the answer: the call is in no segment",
    "interrupted": "interrupted (the run stopped): the call is in no segment",
}


class Decoder(Protocol):
    """What the viewer needs of a tokenizer (a proxy ``ChatTemplate`` has it)."""

    def decode(self, ids: list[int], skip_special: bool = True) -> str: ...


DecoderFor = Callable[[str], Decoder]
"""Model name -> its tokenizer as a ``Decoder`` (raises when it cannot be had)."""


class HFDecoder:
    """A Hugging Face tokenizer as a ``Decoder``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=skip_special))


class FastDecoder:
    """A ``tokenizers`` tokenizer (tokenizer.json) as a ``Decoder``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=skip_special))


def load_decoder(model: str) -> Decoder:
    """The pulled policy's tokenizer (raises ``ForgeError`` when it is not pulled or transformers is missing).

    Its tokenizer.json straight through ``tokenizers`` when there is one: the same ids to the same text,
    without the seconds transformers takes to import."""
    from openforgerl.models.registry import load_tokenizer, require_pulled

    tokenizer_json = require_pulled(model) / "tokenizer.json"
    if tokenizer_json.is_file():
        try:
            from tokenizers import Tokenizer
        except ImportError:
            pass
        else:
            return FastDecoder(Tokenizer.from_file(str(tokenizer_json)))
    return HFDecoder(load_tokenizer(model))


class TokenText:
    """Token ids to text, special tokens kept; single pieces cached (a vocabulary is finite)."""

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self.piece = functools.lru_cache(maxsize=65536)(self._piece)

    def text(self, ids: list[int]) -> str:
        return self.decoder.decode(list(ids), False) if ids else ""

    def _piece(self, token: int) -> str:
        return self.decoder.decode([token], False)

    def policy(self, ids: list[int], logprobs: list[float]) -> Html:
        """Sampled tokens, one ``<i>`` each with its logprob as title (partial characters grouped)."""
        parts, i = [], 0
        while i < len(ids):
            end, text = i + 1, self.piece(ids[i])
            while "\ufffd" in text and end < len(ids) and end - i < MAX_GROUP:
                end += 1
                text = self.text(ids[i:end])
            probs = logprobs[i:end]
            low = " class=low" if any(p < LOW_LOGPROB for p in probs) else ""
            parts.append(f'<i{low} title="{", ".join(f"{p:.3f}" for p in probs)}">{escape_text(text)}</i>')
            i = end
        return join(parts)

    def context(self, ids: list[int]) -> Html:
        return Html(f'<span class="c">{escape_text(self.text(ids))}</span>') if ids else Html("")


@dataclass
class RolloutPage:
    """What one viewer shows."""

    anchor: str
    result: dict[str, Any]
    trajectory: dict[str, Any] | None
    logs: Path | None
    run: str = ""
    neighbours: tuple[str | None, str | None] = (None, None)
    notes: list[str] = field(default_factory=list)


def viewer(page: RolloutPage, tokens: TokenText | None, why_no_tokens: str = "") -> Html:
    result, trajectory = page.result, page.trajectory
    before, after = page.neighbours
    pager = [link("#rollouts", "← all rollouts"), *([link(f"#{before}", "‹ previous")] if before else []),
             *([link(f"#{after}", "next ›")] if after else [])]
    parts = [f'<section class="viewer" id="{h(page.anchor)}" hidden>', '<div class="pager">', *pager, "</div>",
             f"<h2>Rollout {h(result.get('rollout_id'))}</h2>", facts(result, page.run), *map(note, page.notes)]
    if trajectory is None:
        parts.append(note("No trajectory: this harness calls no model, or the rollout ended before it was saved."))
    else:
        parts.append(calls_html(trajectory, tokens, why_no_tokens))
    parts += [verdict(result, page.logs), agent_output(page.logs), "</section>"]
    return join(parts)


def facts(result: dict[str, Any], run: str) -> Html:
    timings = result.get("timings") or {}
    rows = [("run", run), ("task", result.get("task")), ("harness", result.get("harness")),
            ("attempt", result.get("attempt")), ("try", result.get("try_index", 0)),
            ("status", result.get("status")), ("reward", fmt(result.get("reward"))),
            ("reason", result.get("reason") or ""), ("harness exit code", result.get("harness_exit_code")),
            ("wall time", f"{timings['total_s']:.1f} s" if "total_s" in timings else "-")]
    return join(["<dl class=facts>", *(f"<dt>{h(k)}</dt><dd>{h(v)}</dd>" for k, v in rows if v not in ("", None)),
                 "</dl>"])


def calls_html(trajectory: dict[str, Any], tokens: TokenText | None, why_no_tokens: str) -> Html:
    segments = trajectory.get("segments") or []
    calls = trajectory.get("calls") or []
    counts = trajectory.get("counts") or {}
    parts = [f"<h3>Model calls ({len(calls)}, in {len(segments)} segment{'s' * (len(segments) != 1)})</h3>",
             note(", ".join(f"{k}: {v}" for k, v in counts.items() if v) or "no calls")]
    if tokens is None:
        parts.append(note(f"Token colouring needs the policy's tokenizer ({why_no_tokens}); "
                          "showing what the proxy's digest recorded.", "warn"))
    else:
        parts.append(Html('<p class="legend"><span class="policy">sampled by the policy</span>'
                          '<span class="low">sampled, p &lt; 0.1</span><span class="context">not sampled: prompt, '
                          'tool results, template text, forced tokens</span> (hover a token for its logprob)</p>'))
    budget = Budget()
    chunks = {i: call_chunks(segment) for i, segment in enumerate(segments)}
    for call in calls:
        parts.append(call_html(call, segments, chunks, budget, tokens))
    return join(parts)


@dataclass
class Budget:
    """Tokens a viewer still renders: the last ``PROMPT_TOKENS`` of a segment's prompt and the first
    ``RESPONSE_TOKENS`` after it, ``ROLLOUT_TOKENS`` in all."""

    used: dict[int, int] = field(default_factory=dict)
    total: int = 0

    def prompt(self, wanted: int) -> int:
        given = max(min(wanted, PROMPT_TOKENS, ROLLOUT_TOKENS - self.total), 0)
        self.total += given
        return given

    def response(self, segment: int, wanted: int) -> int:
        given = max(min(wanted, RESPONSE_TOKENS - self.used.get(segment, 0), ROLLOUT_TOKENS - self.total), 0)
        self.used[segment] = self.used.get(segment, 0) + given
        self.total += given
        return given


def call_chunks(segment: dict[str, Any]) -> dict[int, tuple[int, int, int]] | None:
    """Call index -> (start, policy start, end) of what it added to the segment's response: each call adds
    a run of mask-0 tokens (new prompt, forced tokens; none for the first) then its sampled mask-1 tokens.
    None when the runs do not match the calls one to one (a call that sampled nothing)."""
    mask, found, i = segment.get("response_mask") or [], [], 0
    while i < len(mask):
        j = i
        while j < len(mask) and mask[j] == 0:
            j += 1
        k = j
        while k < len(mask) and mask[k] == 1:
            k += 1
        found.append((i, j, k))
        i = k
    calls = segment.get("calls") or []
    return dict(zip(calls, found, strict=True)) if len(found) == len(calls) else None


def call_html(call: dict[str, Any], segments: list[dict[str, Any]], chunks: dict[int, Any],
              budget: Budget, tokens: TokenText | None) -> Html:
    index, number = call.get("index"), call.get("segment", -1)
    segment = segments[number] if 0 <= number < len(segments) else None
    starts = segment is not None and (segment.get("calls") or [None])[0] == index
    kind = call.get("kind", "")
    cls = "error" if call.get("status") != "ok" else kind
    parts = [f'<article class="call {h(cls)}"><h4>Call {h(index)} <span class="kind">{h(kind)}</span> '
             f"segment {h(number)}</h4>", note(cause(call, starts), "cause"), Html(telemetry(call))]
    if call.get("error"):
        parts.append(pre(call["error"]))
    if tokens is not None and segment is not None:
        split = chunks.get(number)
        parts.append(call_tokens(segment, number, None if split is None else split.get(index), budget, starts,
                                 tokens))
    parts += [digest_html(call.get("digest")), "</article>"]
    return join(parts)


def cause(call: dict[str, Any], starts: bool) -> str:
    status = call.get("status", "ok")
    if status != "ok":
        return STATUS_CAUSE.get(status, status)
    kind = call.get("kind", "clean")
    key = "first" if starts and kind == "clean" else kind
    return KIND_CAUSE.get(key, kind).format(s=call.get("segment"))


def telemetry(call: dict[str, Any]) -> str:
    keys = (("tokens_in", "tokens in"), ("tokens_out", "out"), ("tokens_reused", "reused"),
            ("queue_ms", "queue ms"), ("ttft_ms", "first token ms"), ("engine_ms", "engine ms"),
            ("overhead_ms", "proxy ms"), ("total_ms", "total ms"))
    shown = [f"{label} {fmt(call[key], 0) if isinstance(call[key], float) else call[key]}"
             for key, label in keys if key in call]
    shown += [f"finish {call['finish']}"] if call.get("finish") else []
    shown += [f"dialect {call['dialect']}"] if call.get("dialect") else []
    return str(note(" · ".join(shown))) if shown else ""


def call_tokens(segment: dict[str, Any], number: int, chunk: tuple[int, int, int] | None, budget: Budget,
                starts: bool, tokens: TokenText) -> Html:
    parts: list[str] = []
    if starts:
        prompt = segment["prompt_ids"]
        shown = budget.prompt(len(prompt))
        label = f"Prompt ({len(prompt)} tokens" + (f"; the first {len(prompt) - shown} not shown)"
                                                   if shown < len(prompt) else ")")
        parts += [f"<h5>{h(label)}</h5>", '<pre class="tokens">', tokens.context(prompt[len(prompt) - shown:]),
                  "</pre>"]
    if chunk is None:
        if not starts:
            return join(parts)
        start, end = 0, len(segment["response_ids"])  # calls not told apart: the whole response, under the first
        title = "Response of the whole segment (its calls cannot be told apart)"
    else:
        start, _, end = chunk
        title = "Response" if starts else "New prompt tokens and response"
    shown = budget.response(number, end - start)
    body = [render_span(segment, start, start + shown, tokens)]
    if shown < end - start:
        body.append(Html(f'<span class="c">… {end - start - shown} more tokens not shown (a viewer shows '
                         f"{RESPONSE_TOKENS} per segment after its prompt, {ROLLOUT_TOKENS} in all)</span>"))
    parts += [f"<h5>{h(title)}</h5>", '<pre class="tokens">', *body, "</pre>"]
    return join(parts)


def render_span(segment: dict[str, Any], start: int, end: int, tokens: TokenText) -> Html:
    """Response tokens start..end, each run of equal mask rendered as policy or context tokens."""
    ids, mask, logprobs = segment["response_ids"], segment["response_mask"], segment["logprobs"]
    parts, i = [], start
    while i < end:
        j = i
        while j < end and mask[j] == mask[i]:
            j += 1
        parts.append(tokens.policy(ids[i:j], logprobs[i:j]) if mask[i] else tokens.context(ids[i:j]))
        i = j
    return join(parts)


def digest_html(digest: dict[str, Any] | None) -> Html:
    if not digest:
        return Html("")
    parts: list[str] = []
    if digest.get("offered"):
        parts.append(note("Tools offered: " + ", ".join(digest["offered"])))
    for result in digest.get("results") or []:
        parts += [f"<h5>Tool result{h(' (' + result['tool'] + ')' if result.get('tool') else '')}</h5>",
                  pre(result.get("text", ""))]
    if digest.get("text"):
        parts += ["<h5>Model text</h5>", pre(digest["text"])]
    for made in digest.get("calls") or []:
        parts += [f"<h5>Tool call: {h(made.get('name'))}</h5>", pre(made.get("args", ""))]
    return join(parts)


def tail(path: Path, limit: int = LOG_TAIL) -> tuple[str, int]:
    """The last ``limit`` characters of a file (about), and its size in bytes; ('', 0) when absent."""
    try:
        size = path.stat().st_size
        with path.open("rb") as stream:
            stream.seek(max(size - 4 * limit, 0))
            text = stream.read().decode("utf-8", errors="replace")
    except OSError:
        return "", 0
    return text[-limit:], size


def log_block(logs: Path | None, name: str, title: str) -> Html:
    if logs is None:
        return Html("")
    text, size = tail(logs / name)
    if not size:
        return Html(f"<h4>{h(title)}</h4>" + note("(empty)"))
    cut = f" (last {len(text)} characters of {size} bytes)" if len(text.encode()) < size else ""
    return join([f"<h4>{h(title + cut)}</h4>", pre(text)])


def verdict(result: dict[str, Any], logs: Path | None) -> Html:
    parts = ["<h3>Verifier</h3>", note(f"status {result.get('status')} · reward {fmt(result.get('reward'))}")]
    if result.get("metrics"):
        parts += ["<h4>Metrics</h4>", pre(pretty_json(result["metrics"]))]
    if result.get("sandbox"):
        parts += ["<h4>Sandbox</h4>", pre(pretty_json(result["sandbox"]))]
    parts += [log_block(logs, "verifier.stdout", "verifier stdout"), log_block(logs, "verifier.stderr",
                                                                               "verifier stderr")]
    return join(parts)


def agent_output(logs: Path | None) -> Html:
    return join(["<h3>Agent</h3>", log_block(logs, "agent.stderr", "agent stderr"),
                 log_block(logs, "agent.stdout", "agent stdout")])

