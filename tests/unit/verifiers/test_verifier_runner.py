"""The runner's contract: a reward file always, computed in this run; composition; test.sh itself."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from openforgerl.errors import UserError
from openforgerl.verifiers.reward import parse_reward_files
from openforgerl.verifiers import compile_verifier, load_verifier, make_verifier, run_compiled

EXISTS = {"type": "file_exists", "path": "/app/done"}
MISSING = {"type": "file_exists", "path": "/app/missing"}


def test_an_agent_written_reward_file_is_replaced_by_the_real_verdict(box):
    box.write("/logs/verifier/reward.json", '{"reward": 1.0, "planted": true}')
    box.write("/logs/verifier/reward.txt", "1")
    verdict = box.verify(MISSING)
    assert verdict.reward == 0.0 and "planted" not in verdict.metrics
    assert not box.path("/logs/verifier/reward.txt").exists()


def test_a_planted_symlink_in_place_of_the_reward_file_is_not_written_through(box, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text('{"reward": 1}')
    box.path("/logs/verifier").mkdir(parents=True)
    box.path("/logs/verifier/reward.json").symlink_to(outside)
    assert box.verify(MISSING).reward == 0.0
    assert json.loads(outside.read_text()) == {"reward": 1}
    assert not box.path("/logs/verifier/reward.json").is_symlink()


def test_all_any_weighted_combine_child_rewards(box):
    box.write("/app/done", "")
    assert box.verify({"type": "all", "checks": [EXISTS, MISSING]}).reward == 0.0
    assert box.verify({"type": "any", "checks": [MISSING, EXISTS]}).reward == 1.0
    weighted = {"type": "weighted", "checks": [EXISTS, MISSING], "weights": [3, 1]}
    assert box.verify(weighted).reward == 0.75
    assert box.verify({**weighted, "pass_threshold": 0.8}).reward == 0.0
    assert box.verify({**weighted, "pass_threshold": 0.75}).reward == 1.0


def test_metrics_name_every_check_and_nest_compositions(box):
    box.write("/app/done", "")
    spec = {"type": "all", "checks": [EXISTS, {"type": "any", "name": "either", "checks": [MISSING, EXISTS]},
                                      {**MISSING, "name": "report"}]}
    verdict = box.verify(spec)
    checks = verdict.metrics["checks"]
    assert list(checks) == ["file_exists", "either", "report"]
    assert list(checks["either"]["checks"]) == ["file_exists", "file_exists_2"]
    assert checks["report"]["reward"] == 0.0 and verdict.metrics["spec_sha256"]


def test_a_crashing_check_fails_alone_and_the_others_still_count(box):
    box.write("/app/done", "")
    box.path("/app/state.json").mkdir()  # reading a directory raises
    spec = {"type": "weighted", "checks": [EXISTS, {"type": "json_path", "path": "/app/state.json",
                                                    "json_path": "$.a", "equals": 1}]}
    verdict = box.verify(spec)
    assert verdict.reward == 0.5 and verdict.error is None
    assert "not a regular file" in verdict.metrics["checks"]["json_path"]["error"]


def test_a_corrupt_spec_file_still_ends_in_a_zero_reward_with_the_error(box):
    compile_verifier(EXISTS, box.tests)
    (box.tests / "forge_verify.json").write_text("{not json")
    verdict = run_compiled(box.tests, box.root)
    assert verdict.reward == 0.0 and "forge_verify.json" in verdict.metrics["error"]


def test_an_unknown_check_type_fails_with_the_known_ones_listed(box):
    compile_verifier(EXISTS, box.tests)
    (box.tests / "forge_verify.json").write_text('{"type": "telepathy"}')
    verdict = run_compiled(box.tests, box.root)
    assert verdict.reward == 0.0
    assert "telepathy" in verdict.metrics["error"] and "file_exists" in verdict.metrics["error"]


def test_test_sh_runs_the_runner_and_passes_its_arguments(box):
    box.write("/app/done", "")
    compile_verifier(EXISTS, box.tests)
    done = subprocess.run(["bash", str(box.tests / "test.sh"), "--root", str(box.root)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert parse_reward_files(box.path("/logs/verifier")).reward == 1.0
    assert not (box.tests / "__pycache__").exists()


def test_compile_refuses_to_overwrite_a_hand_written_test_sh(tmp_path: Path):
    (tmp_path / "test.sh").write_text("#!/bin/bash\necho mine\n")
    with pytest.raises(UserError, match="not written by forge"):
        compile_verifier(EXISTS, tmp_path)
    compile_verifier(EXISTS, tmp_path, overwrite=True)
    compile_verifier(MISSING, tmp_path)  # ours now: recompiling is fine
    assert load_verifier(tmp_path).path == "/app/missing"


def test_the_compiled_spec_holds_every_default(tmp_path: Path):
    compile_verifier({"type": "command", "command": "true"}, tmp_path)
    data = json.loads((tmp_path / "forge_verify.json").read_text())
    assert data == {"type": "command", "name": None, "command": "true", "expect_exit": 0, "cwd": "/app",
                    "timeout_sec": 60.0}


@pytest.mark.parametrize(("spec", "names"), [
    ({"type": "file_exists", "path": "app/x"}, ["file_exists.path", "absolute path"]),
    ({"type": "http", "url": "http://example.com/state"}, ["http", "not loopback"]),
    ({"type": "sqlite", "database": "/app/db", "query": "select 1"}, ["sqlite", "expect_rows", "expect_scalar"]),
    ({"type": "weighted", "checks": [EXISTS], "weights": [1, 2]}, ["weighted", "weights"]),
    ({"type": "file_regex", "path": "/app/x", "pattern": "(unclosed"}, ["file_regex.pattern", "regular expression"]),
    ({"type": "json_path", "path": "/app/x", "json_path": "$.a"}, ["json_path.equals", "required"]),
    ({"type": "all", "checks": [{**EXISTS, "name": "a"}, {**MISSING, "name": "a"}]}, ["all", "share a name"]),
    ({"type": "test_suite", "framework": "junit"}, ["test_suite", "command and junit_xml"]),
    ({"type": "file_exists", "path": "/app/x", "extra": 1}, ["file_exists.extra"]),
    ({"type": "teleport"}, ["teleport"]),
])
def test_bad_specs_are_user_errors_naming_the_field(spec, names):
    with pytest.raises(UserError) as caught:
        make_verifier(spec)
    assert all(name in str(caught.value) for name in names), str(caught.value)


def test_footprint_lists_judged_paths_and_image_needs():
    from openforgerl.verifiers import image_needs, state_paths

    spec = make_verifier({"type": "any", "checks": [
        EXISTS, {"type": "sqlite", "database": "/app/shop.db", "query": "select 1", "expect_scalar": 1},
        {"type": "all", "checks": [{**EXISTS, "name": "again"},
                                   {"type": "dom", "url": "/", "base_url_file": "/run/forge-webapp/url",
                                    "aria_contains": ["- heading"]},
                                   {"type": "test_suite"}]}]})
    assert state_paths(spec) == ["/app/done", "/app/shop.db"]
    assert image_needs(spec) == ["python3", "chromium", "python3:playwright", "/run/forge-webapp/url", "bash",
                                 "python3:pytest"]
