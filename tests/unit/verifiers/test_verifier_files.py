"""File checks: exists / contains / regex / JSON path, against passing, failing and planted state."""

from __future__ import annotations

import os

import pytest


def test_file_exists_passes_for_a_file_and_fails_when_missing(box):
    spec = {"type": "file_exists", "path": "/app/out.txt"}
    assert box.verify(spec).reward == 0.0
    box.write("/app/out.txt", "")
    assert box.verify(spec).reward == 1.0


def test_file_exists_kind_dir_rejects_a_file_and_absent_inverts(box):
    box.write("/app/out", "not a dir")
    assert box.verify({"type": "file_exists", "path": "/app/out", "kind": "dir"}).reward == 0.0
    assert box.verify({"type": "file_exists", "path": "/app/out", "kind": "any"}).reward == 1.0
    assert box.verify({"type": "file_exists", "path": "/app/out", "absent": True}).reward == 0.0
    assert box.verify({"type": "file_exists", "path": "/app/gone", "absent": True}).reward == 1.0


def test_file_contains_passes_fails_and_ignores_case_when_asked(box):
    box.write("/app/notes.md", "The Answer is 42\n")
    assert box.verify({"type": "file_contains", "path": "/app/notes.md", "text": "Answer is 42"}).reward == 1.0
    assert box.verify({"type": "file_contains", "path": "/app/notes.md", "text": "answer IS 42"}).reward == 0.0
    spec = {"type": "file_contains", "path": "/app/notes.md", "text": "answer IS 42", "ignore_case": True}
    assert box.verify(spec).reward == 1.0
    assert box.verify({"type": "file_contains", "path": "/app/notes.md", "text": "43", "absent": True}).reward == 1.0


def test_missing_file_fails_with_the_reason_in_the_metrics(box):
    verdict = box.verify({"type": "file_contains", "path": "/app/report.txt", "text": "done"})
    assert verdict.reward == 0.0 and verdict.error is None
    assert "report.txt" in verdict.metrics["error"] and "FileNotFoundError" in verdict.metrics["error"]


def test_a_fifo_planted_at_the_path_fails_instead_of_hanging(box):
    os.mkfifo(box.path("/app/report.txt"))
    verdict = box.verify({"type": "file_contains", "path": "/app/report.txt", "text": "done"})
    assert verdict.reward == 0.0 and "not a regular file" in verdict.metrics["error"]


def test_a_file_over_max_bytes_fails_instead_of_being_read(box):
    box.write("/app/big.txt", "done" + "x" * 5000)
    verdict = box.verify({"type": "file_contains", "path": "/app/big.txt", "text": "done", "max_bytes": 1000})
    assert verdict.reward == 0.0 and "max_bytes" in verdict.metrics["error"]


def test_a_symlink_is_judged_by_what_it_points_to(box):
    box.write("/app/real.txt", "done")
    os.symlink(box.path("/app/real.txt"), box.path("/app/link.txt"))
    assert box.verify({"type": "file_contains", "path": "/app/link.txt", "text": "done"}).reward == 1.0


def test_file_regex_search_fullmatch_and_multiline(box):
    box.write("/app/version.txt", "name: demo\nversion: 1.4.2\n")
    search = {"type": "file_regex", "path": "/app/version.txt", "pattern": r"^version: \d+\.\d+\.\d+$"}
    assert box.verify(search).reward == 1.0
    assert box.verify({**search, "multiline": False}).reward == 0.0
    assert box.verify({**search, "fullmatch": True}).reward == 0.0
    assert box.verify({**search, "pattern": r"name: demo\nversion: 1\.4\.2", "fullmatch": True}).reward == 1.0


def test_partial_output_does_not_match_a_fullmatch(box):
    box.write("/app/out.csv", "id,total\n1,")
    spec = {"type": "file_regex", "path": "/app/out.csv", "pattern": r"id,total\n1,\d+", "fullmatch": True}
    assert box.verify(spec).reward == 0.0


@pytest.mark.parametrize(("document", "path", "equals", "reward"), [
    ({"items": [{"name": "a"}, {"name": "b"}]}, "$.items[1].name", "b", 1.0),
    ({"items": [{"name": "a"}]}, "$.items[1].name", "b", 0.0),         # index out of range
    ({"count": 3}, "count", 3.0, 1.0),                                  # numbers compare by value
    ({"done": 1}, "$.done", True, 0.0),                                 # true is not 1
    ({"done": True}, "$.done", 1, 0.0),
    ({"a.b": {"c": None}}, '$["a.b"].c', None, 1.0),                    # null is a value
    ({"a": {}}, "$.a.c", None, 0.0),                                    # absent is not null
    ([1, 2], "$", [1, 2], 1.0),
])
def test_json_path_equals(box, document, path, equals, reward):
    import json

    box.write("/app/state.json", json.dumps(document))
    verdict = box.verify({"type": "json_path", "path": "/app/state.json", "json_path": path, "equals": equals})
    assert verdict.reward == reward, verdict.metrics


def test_malformed_json_fails_with_the_parse_error(box):
    box.write("/app/state.json", '{"done": tru')
    verdict = box.verify({"type": "json_path", "path": "/app/state.json", "json_path": "$.done", "equals": True})
    assert verdict.reward == 0.0 and "not valid JSON" in verdict.metrics["error"]
