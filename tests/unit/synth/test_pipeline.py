"""forge synth's pipeline on a toy asset (no Docker): every candidate decided and recorded, duplicates
caught by signature and by instruction, resumable, and the LLM proposer's junk rejected with reasons."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from toy import CopyNote, toy_asset

from openforgerl.errors import UserError
from openforgerl.synth.families import FAMILIES
from openforgerl.synth.llm import LlmSettings
from openforgerl.synth.pipeline import CANDIDATES, SynthConfig, synthesize
from openforgerl.testing.openai_stub import Reply, ScriptedChatServer


class SameTaskAnyTarget(CopyNote):
    """Two tasks copying the same note are the same task, whatever the target file is called."""

    name = "claw.toy.copy"

    def signature(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"note": params["note"]}


@pytest.fixture
def asset_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setitem(FAMILIES.builtins, "claw.toy.copy", "toy:CopyNote")
    return toy_asset(tmp_path / "assets" / "toy").root


def run(config: SynthConfig):
    return asyncio.run(synthesize(config))


def records(out: Path) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in (out / CANDIDATES).read_text().splitlines()]
    return {line["id"]: line for line in lines}


def test_every_candidate_is_decided_and_recorded_and_kept_tasks_are_written(asset_dir: Path, tmp_path: Path):
    result = run(SynthConfig(assets=[str(asset_dir)], n=3, out=str(tmp_path / "out"), build=False, max_proposals=60))
    kept = result.kept
    assert len(kept) == 3 and all((result.out / c.path / "task.toml").is_file() for c in kept)
    lines = records(result.out)
    assert set(lines) == {c.id for c in result.candidates}
    assert all(line["decision"] in ("kept", "rejected") for line in lines.values())
    for line in lines.values():
        if line["reason_code"] == "dedup.near":
            assert lines[line["cluster"]]["decision"] == "kept" and line["max_jaccard"] >= 0.7
    report = json.loads((result.out / "synth_report.json").read_text())
    assert report["kept"] == 3 and report["funnel"]["overall"]["proposed"] == len(lines)
    assert report["funnel"]["overall"]["dry_run"] >= 3 and report["dedup"]["params"]["threshold"] == 0.7
    assert report["diversity"]["families"] == 1 and report["run"]["assets"][0]["name"] == "toy"
    assert all(r["kept"] or r["size"] > 1 for r in report["dedup"]["clusters"])


def test_the_same_task_under_another_name_is_dropped_by_its_signature(asset_dir: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(FAMILIES.builtins, "claw.toy.copy", "test_pipeline:SameTaskAnyTarget")
    result = run(SynthConfig(assets=[str(asset_dir)], n=5, out=str(tmp_path / "out"), build=False, max_proposals=30))
    assert len(result.kept) == 3  # one per note: there are three
    codes = {c.reason_code for c in result.candidates if c.decision == "rejected"}
    assert "dedup.task_sig" in codes


def test_a_resumed_run_skips_decided_candidates_and_counts_kept_ones(asset_dir: Path, tmp_path: Path):
    out = tmp_path / "out"
    first = run(SynthConfig(assets=[str(asset_dir)], n=2, out=str(out), build=False, max_proposals=60))
    with pytest.raises(UserError, match="--resume"):
        run(SynthConfig(assets=[str(asset_dir)], n=3, out=str(out), build=False))
    second = run(SynthConfig(assets=[str(asset_dir)], n=3, out=str(out), build=False, max_proposals=60, resume=True))
    assert {c.id for c in first.candidates}.isdisjoint({c.id for c in second.candidates})
    assert len(second.kept) == 1 and json.loads((out / "synth_report.json").read_text())["kept"] == 3


def test_unknown_families_and_missing_assets_are_one_line_with_the_fix(asset_dir: Path, tmp_path: Path):
    (asset_dir / "asset.toml").write_text((asset_dir / "asset.toml").read_text().replace("claw.toy.copy", "claw.nope"))
    with pytest.raises(UserError, match=r"asset.toml: families: unknown claw.nope"):
        run(SynthConfig(assets=[str(asset_dir)], n=1, out=str(tmp_path / "o1"), build=False))
    with pytest.raises(UserError, match="no asset.toml"):
        run(SynthConfig(assets=[str(tmp_path / "o1")], n=1, out=str(tmp_path / "o2"), build=False))


def test_the_llm_proposer_s_good_bad_and_duplicate_proposals(asset_dir: Path, tmp_path: Path):
    good = {"params": {"note": "beta.txt", "target": "b.txt"},
            "instruction": "Please copy beta.txt into /app/out/b.txt for me."}
    vague = {"params": {"note": "gamma.txt", "target": "g.txt"}, "instruction": "Copy a note."}
    replies = [json.dumps(good), "Sure! Here is a task", "still no json",
               json.dumps({"params": {"note": "delta.txt", "target": "d.txt"}}), json.dumps(vague), json.dumps(good)]
    with ScriptedChatServer([Reply(content=r) for r in replies], model="tiny") as server:
        llm = LlmSettings(base_url=server.base_url, model="tiny", attempts=2, json_schema=True)
        result = run(SynthConfig(assets=[str(asset_dir)], n=3, out=str(tmp_path / "out"), build=False,
                                 proposer="llm", llm=llm, max_proposals=5))
        schema_sent = server.requests[0]["response_format"]["json_schema"]["schema"]
    by_index = {c.index: c for c in result.candidates}
    assert by_index[0].decision == "kept" and "model's wording" in by_index[0].notes[0]
    assert (result.out / by_index[0].path / "instruction.md").read_text().startswith("Please copy beta.txt")
    assert by_index[1].reason_code == "schema.malformed" and "none usable" in by_index[1].reason
    assert by_index[2].reason_code == "grounding" and "delta.txt" in by_index[2].reason
    assert by_index[3].decision == "kept" and "family's" in by_index[3].notes[0]  # the vague wording was not used
    assert by_index[4].reason_code in ("dedup.task_sig", "dedup.verifier_sig")
    assert by_index[0].proposer == "llm:tiny" and by_index[0].prompt_hash
    assert schema_sent["properties"]["params"]["type"] == "object"
    report = json.loads((result.out / "synth_report.json").read_text())
    assert report["run"]["llm"]["calls"] == 6 and report["rejections"]["schema.malformed"]["count"] == 1


def test_a_refused_request_rejects_its_candidate_and_the_run_goes_on(asset_dir: Path, tmp_path: Path):
    good = {"params": {"note": "beta.txt", "target": "b.txt"}, "instruction": "Copy beta.txt into /app/out/b.txt."}
    refused = Reply(status=400, raw=json.dumps({"error": {"message": "Grammar error: Unimplemented keys"}}).encode())
    with ScriptedChatServer([refused, json.dumps(good)], after_last="repeat", model="tiny") as server:
        llm = LlmSettings(base_url=server.base_url, model="tiny", attempts=2)
        result = run(SynthConfig(assets=[str(asset_dir)], n=1, out=str(tmp_path / "out"), build=False,
                                 proposer="llm", llm=llm, max_proposals=3))
    first, second = sorted(result.candidates, key=lambda c: c.index)
    assert first.reason_code == "schema.refused" and "Grammar error" in first.reason
    assert second.decision == "kept"


def test_the_schema_sent_for_constrained_decoding_drops_what_decoders_refuse():
    from openforgerl.synth.llm import grammar_schema

    schema = {"type": "object", "properties": {"title": {"type": "string", "not": {"enum": ["Old"]}},
                                               "list": {"enum": ["Home", "Work"]}}, "required": ["title"]}
    assert grammar_schema(schema) == {"type": "object", "required": ["title"],
                                      "properties": {"title": {"type": "string"}, "list": {"enum": ["Home", "Work"]}}}
    # a pattern with length bounds would move vLLM off xgrammar for good (and break forced tool calls): bounds go
    email = {"type": "string", "minLength": 3, "maxLength": 80, "pattern": "^[^@ ]+@[^@ ]+$"}
    assert grammar_schema({"type": "object", "properties": {"email": email, "name": {"type": "string", "maxLength": 9},
                                                            "tags": {"type": "array", "uniqueItems": True}}}) == \
        {"type": "object", "properties": {"email": {"type": "string", "pattern": "^[^@ ]+@[^@ ]+$"},
                                          "name": {"type": "string", "maxLength": 9}, "tags": {"type": "array"}}}


def freeform(verifier: dict, failure: str = "echo first note > /app/out/b.txt", **extra: str) -> str:
    task = {"title": "Copy beta", "instruction": "Copy beta.txt to /app/out/b.txt (it says: second note).",
            "verifier": verifier, "solution": "mkdir -p /app/out && cp /app/beta.txt /app/out/b.txt",
            "failure_cases": {"wrong_note": f"mkdir -p /app/out && {failure}"}}
    return json.dumps({"params": {**task, **extra}})


GOOD_CHECK = {"type": "file_contains", "path": "/app/out/b.txt", "text": "second note"}


def test_freeform_tasks_keep_model_scripts_off_the_host_and_their_failure_cases_in_the_task(asset_dir: Path,
                                                                                            tmp_path: Path):
    replies = [freeform(GOOD_CHECK),
               freeform({"type": "command", "run": "cat /app/out/b.txt"}),  # runs what the model wrote: refused
               freeform({"type": "file_exists", "path": "/app/beta.txt"},  # passes doing nothing
                        instruction="Make sure /app/beta.txt is there."),
               freeform({"type": "file_contains", "path": "/app/out/b.txt", "text": "third"})]  # never named
    with ScriptedChatServer(replies, model="strong") as server:
        llm = LlmSettings(base_url=server.base_url, model="strong", mode="freeform")
        result = run(SynthConfig(assets=[str(asset_dir)], n=2, out=str(tmp_path / "out"), build=False,
                                 proposer="llm", llm=llm, max_proposals=4))
        system = server.requests[0]["messages"][0]["content"]
    by_index = {c.index: c for c in result.candidates}
    kept = by_index[0]
    assert kept.decision == "kept" and kept.family == "claw.freeform" and kept.dry_run == {"nop": 0.0}
    assert any("only in build-env's containers" in note for note in kept.notes)
    task = result.out / kept.path
    assert (task / "solution" / "failures" / "wrong_note.sh").read_text().startswith("#!/bin/bash\nmkdir -p")
    assert "cp /app/beta.txt /app/out/b.txt" in (task / "solution" / "solve.sh").read_text()
    assert by_index[1].reason_code == "grounding" and "uses command" in by_index[1].reason
    assert by_index[2].reason_code == "dry_run.nop"
    assert by_index[3].reason_code == "literals" and "'third'" in by_index[3].reason
    assert "failure cases" in system and "file_contains" in system


def test_a_full_disk_is_one_line_and_a_rerun_resumes_after_the_decided_candidates(asset_dir: Path, tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch):
    import errno

    from openforgerl.errors import ResourceError
    from openforgerl.synth import pipeline

    real, written = pipeline.write_task, []

    def fills_up(candidate, *args, **kwargs):
        if written:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(candidate.id)
        return real(candidate, *args, **kwargs)

    monkeypatch.setattr(pipeline, "write_task", fills_up)
    config = SynthConfig(assets=[str(asset_dir)], n=2, out=str(tmp_path / "out"), build=False)
    with pytest.raises(ResourceError, match="no space left on device while writing tasks") as exc:
        run(config)
    assert "\n" not in str(exc.value) and list(records(tmp_path / "out")) == written
    monkeypatch.setattr(pipeline, "write_task", real)
    run(config.model_copy(update={"resume": True}))
    decided = records(tmp_path / "out")
    assert [i for i, r in decided.items() if r["decision"] == "kept"] == [written[0], "claw-toy-copy-00001"]


def test_an_endpoint_that_is_down_is_one_line_before_anything_is_proposed(asset_dir: Path, tmp_path: Path):
    from openforgerl.errors import ProviderError

    llm = LlmSettings(base_url="http://127.0.0.1:9/v1", timeout_s=2)
    with pytest.raises(ProviderError, match="proposer model"):
        run(SynthConfig(assets=[str(asset_dir)], n=1, out=str(tmp_path / "out"), build=False, proposer="llm", llm=llm))


def test_calibration_records_pass_at_k_and_tags_the_learnable_tasks(asset_dir: Path, tmp_path: Path):
    from openforgerl.evaluation.runner import EvalConfig
    from openforgerl.tasks import Task
    from openforgerl.testing.runtime import FakeRuntime, Scenario, exits, reward

    verdicts = iter([1.0, 0.0] * 20)

    async def half_the_time(box, command, timeout):
        return await reward(next(verdicts))(box, command, timeout)

    calibrate = EvalConfig(harnesses=["nop"], attempts=2, ks=[1, 2], concurrency=1)
    result = asyncio.run(synthesize(SynthConfig(assets=[str(asset_dir)], n=2, out=str(tmp_path / "out"), build=False,
                                                calibrate=calibrate, max_proposals=60),
                                    runtime=FakeRuntime(Scenario(agent=exits(0), verifier=half_the_time))))
    lines = records(result.out)
    kept = [line for line in lines.values() if line["decision"] == "kept"]
    assert len(kept) == 2 and all(line["stage"] == "calibrate" for line in kept)
    assert all(line["calibration"] == {"harness": "nop", "n": 2, "pass@1": 0.5, "pass@2": 1.0, "learnable": True}
               for line in kept)
    assert all("learnable" in Task.load(result.out / line["path"]).config.metadata.tags for line in kept)
    report = json.loads((result.out / "synth_report.json").read_text())
    assert report["funnel"]["overall"]["calibrate"] == 2
