"""The LLM proposer against the real local model (SmolLM2-135M on vLLM, asked by JSON schema): whatever
the small model answers, every proposal ends decided (kept, or rejected with a reason code and its
evidence), nothing crashes, and the funnel accounts for every candidate."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from openforgerl.synth.candidate import STAGES
from openforgerl.synth.llm import LlmSettings
from openforgerl.synth.pipeline import SynthConfig, synthesize

pytestmark = pytest.mark.model

PROPOSALS = 2  # each call may run to max_tokens at ~10 tokens/s on a 2-core vLLM: CI's budget


@pytest.mark.parametrize("mode", ["params", "freeform"])
def test_smollm2_proposals_are_all_decided_and_its_junk_is_rejected_with_reasons(vllm_base_url: str, mode: str,
                                                                                 tmp_path: Path):
    # 2 shared cores: a call may wait behind others; the per-call limit is not what this test is about
    llm = LlmSettings(base_url=vllm_base_url, mode=mode, max_tokens=256, timeout_s=900)
    config = SynthConfig(domain="claw", n=PROPOSALS, out=str(tmp_path / "out"), build=False, proposer="llm",
                         llm=llm, max_proposals=PROPOSALS)
    result = asyncio.run(synthesize(config))
    assert len(result.candidates) == PROPOSALS
    for candidate in result.candidates:
        assert candidate.proposer == "llm:smollm2" and candidate.prompt_hash
        if candidate.decision == "kept":
            assert candidate.stage in STAGES and (result.out / candidate.path / "task.toml").is_file()
        else:
            assert candidate.decision == "rejected" and candidate.reason_code and candidate.reason
    lines = [json.loads(line) for line in (result.out / "candidates.jsonl").read_text().splitlines()]
    assert len(lines) == PROPOSALS
    report = json.loads((result.out / "synth_report.json").read_text())
    assert report["funnel"]["overall"]["proposed"] == PROPOSALS and report["run"]["llm"]["calls"] >= PROPOSALS
    rejected = sum(entry["count"] for entry in report["rejections"].values())
    assert rejected + report["kept"] == PROPOSALS
