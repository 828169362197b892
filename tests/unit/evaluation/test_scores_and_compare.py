"""eval.json's numbers from rollout lines, cost breakdowns, and comparisons between runs."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from openforgerl.evaluation.compare import compare, permutation_test, sign_test
from openforgerl.evaluation.cost import by_harness, rollout_cost, totals
from openforgerl.evaluation.scores import run_scores


def line(task: str, attempt: int, status: str, harness: str = "react", reward: float | None = None,
         try_index: int = 0, **extra: Any) -> dict[str, Any]:
    if reward is None and status in ("success", "failure", "agent_timeout"):
        reward = 1.0 if status == "success" else 0.0
    return {"task": task, "attempt": attempt, "status": status, "harness": harness, "reward": reward,
            "try_index": try_index, **extra}


def test_per_task_per_harness_and_overall_with_infra_errors_left_out_and_counted():
    lines = [line("a", 0, "success"), line("a", 1, "failure"), line("a", 2, "success"),
             line("b", 0, "failure"), line("b", 1, "agent_timeout"), line("b", 2, "infra_error"),
             line("b", 2, "failure", try_index=1),      # the retry is what counts
             line("c", 0, "success"), line("c", 1, "cancelled"), line("c", 2, "verifier_error")]
    scores = run_scores(lines, [1, 3])
    tasks = scores["harnesses"]["react"]["tasks"]
    assert tasks["a"]["n"] == 3 and tasks["a"]["pass@1"] == pytest.approx(2 / 3)
    assert tasks["a"]["pass@3"] == 1.0 and tasks["a"]["pass^3"] == 0.0
    assert tasks["b"]["n"] == 3 and tasks["b"]["pass@3"] == 0.0 and tasks["b"]["infra_error"] == 0
    assert tasks["c"]["n"] == 1 and tasks["c"]["pass@3"] is None and tasks["c"]["cancelled"] == 1
    overall = scores["harnesses"]["react"]["overall"]
    assert overall["pass@1"] == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert overall["pass@3"] == pytest.approx(0.5) and overall["short"] == {"k=3": 1}
    assert overall["cancelled"] == 1 and overall["verifier_error"] == 1
    assert scores["overall"]["pass@1"] == overall["pass@1"]


def test_two_harnesses_are_scored_apart():
    lines = [line("a", 0, "success", "react"), line("a", 0, "failure", "codex")]
    scores = run_scores(lines, [1])
    assert scores["harnesses"]["react"]["overall"]["pass@1"] == 1.0
    assert scores["harnesses"]["codex"]["overall"]["pass@1"] == 0.0 and scores["overall"]["pass@1"] == 0.5


def test_the_cost_phases_of_a_rollout_add_up_to_its_wall_time():
    result = {"timings": {"container_start_s": 1.0, "harness_s": 10.0, "seal_s": 0.5, "verifier_s": 2.0,
                          "total_s": 14.0},
              "model_usage": {"calls": 2, "engine_ms": 6000, "queue_ms": 1000, "overhead_ms": 500, "total_ms": 7500,
                              "tokens_in": 900, "tokens_out": 100, "tokens_reused": 400}}
    cost = rollout_cost(result)
    assert (cost["model"], cost["queueing"], cost["proxy_overhead"], cost["agent"]) == (6.0, 1.0, 0.5, 2.5)
    assert cost["other"] == pytest.approx(0.5)
    phases = ("container_start", "agent", "model", "queueing", "proxy_overhead", "seal", "verifier", "other")
    assert sum(cost[p] for p in phases) == pytest.approx(cost["total"]) == pytest.approx(14.0)
    summed = totals([result, {**result, "try_index": 1}])
    assert summed["seconds"]["total"] == 28.0 and summed["retries"] == 1 and summed["tokens"]["tokens_reused"] == 800
    assert summed["share"]["model"] == pytest.approx(6 / 14, abs=1e-4)
    assert set(by_harness([{**result, "harness": "react"}, {**result, "harness": "codex"}])) == {"codex", "react"}


def test_a_rollout_without_model_calls_costs_only_its_phases():
    cost = rollout_cost({"timings": {"container_start_s": 0.5, "harness_s": 1.0, "total_s": 2.0}})
    assert cost["agent"] == 1.0 and cost["model"] == 0.0 and cost["other"] == 0.5 and cost["tokens_in"] == 0


def test_a_comparison_pairs_tasks_and_tests_the_difference():
    a = [line(t, i, "failure") for t in "abcdefgh" for i in range(2)]
    b = [line(t, i, "success") for t in "abcdefg" for i in range(2)] + [line("h", 0, "failure"),
                                                                          line("h", 1, "failure")]
    result = compare(a, b)
    assert result["paired_by"] == "task" and len(result["pairs"]) == 8
    assert result["mean_delta_pass@1"] == pytest.approx(7 / 8)
    assert result["sign_test"] == {"better": 7, "worse": 0, "ties": 1, "p": pytest.approx(2 / 128)}
    assert result["permutation_test"]["p"] == pytest.approx(2 / 128) and result["permutation_test"]["method"] == "exact"


def test_tasks_only_one_run_has_are_listed_not_paired():
    result = compare([line("a", 0, "success"), line("b", 0, "success")],
                     [line("a", 0, "success"), line("c", 0, "failure")])
    assert [p["task"] for p in result["pairs"]] == ["a"]
    assert result["only_a"] == [["*", "b"]] and result["only_b"] == [["*", "c"]]
    assert result["sign_test"]["p"] is None and result["permutation_test"]["p"] is None


def test_the_permutation_test_matches_brute_force_and_its_sampled_form_is_close():
    deltas = [0.5, -0.25, 1.0, 0.75, -0.5, 0.25]
    observed = abs(sum(deltas))
    flips = list(itertools.product((1, -1), repeat=len(deltas)))
    brute = sum(abs(sum(s * d for s, d in zip(f, deltas, strict=True))) >= observed - 1e-12 for f in flips) / len(flips)
    assert permutation_test(deltas)["p"] == pytest.approx(brute)
    many = [0.5, -0.25, 1.0, 0.75, -0.5, 0.25] * 3
    assert 0 < permutation_test(many)["p"] < 1 and permutation_test(many)["method"].endswith("random sign flips")


def test_the_sign_test_is_two_sided_and_symmetric():
    assert sign_test([1, 1, -1])["p"] == pytest.approx(1.0)
    assert sign_test([-1] * 5)["p"] == sign_test([1] * 5)["p"] == pytest.approx(2 / 32)
