"""Judging nop/oracle repeats: bounds, flakiness, crashes — each with a reason a user can act on."""

from __future__ import annotations

from openforgerl.envs.baselines import check_bounds
from openforgerl.rollout.orchestrator import RolloutResult


def runs(harness: str, *rewards: float | None, status: str | None = None, reason: str = "") -> list[RolloutResult]:
    return [RolloutResult(f"r-{i}", "t", i, harness, status or ("success" if r else "failure"), r, reason)
            for i, r in enumerate(rewards)]


def test_nop_scoring_0_and_oracle_scoring_1_pass():
    assert check_bounds("nop", runs("nop", 0.0, 0.0), 0.0) == (True, "")
    assert check_bounds("oracle", runs("oracle", 1.0, 1.0), 1.0) == (True, "")


def test_a_verifier_that_passes_doing_nothing_fails_the_nop_check():
    ok, reason = check_bounds("nop", runs("nop", 1.0, 1.0), 0.0)
    assert not ok and reason.startswith("nop check") and "passes without the task being done" in reason


def test_a_wrong_solution_fails_the_oracle_check():
    ok, reason = check_bounds("oracle", runs("oracle", 0.0, 0.0), 1.0)
    assert not ok and "oracle_min 1" in reason and "[0, 0]" in reason


def test_repeats_that_disagree_are_flaky_even_when_each_would_pass():
    ok, reason = check_bounds("nop", runs("nop", 0.0, 0.0, 0.0, 0.5), 0.5)
    assert not ok and "flaky" in reason and "[0, 0, 0, 0.5]" in reason


def test_a_crashing_verifier_fails_with_its_message():
    ok, reason = check_bounds("nop", runs("nop", None, None, status="verifier_error", reason="boom"), 0.0)
    assert not ok and "the verifier crashed in 2/2 repeats: boom" in reason


def test_a_verifier_that_hangs_on_the_solution_s_work_fails_the_oracle_check_saying_so():
    """The orchestrator scores a verifier that hangs only on the agent's work 0 (see its control run); for the
    reference solution that means a solution that hangs its tests, which the repair step must be told."""
    hung = runs("oracle", 0.0, 0.0, reason="verifier timed out after 8 s on the agent's work; on the task's "
                                           "untouched image it ended in 0.1 s")
    for result in hung:
        result.sandbox["verifier_timeout"] = {"seconds": 8.0, "control_s": 0.1}
    ok, reason = check_bounds("oracle", hung, 1.0)
    assert not ok and "oracle_min 1" in reason and "verifier timed out after 8 s on the agent's work" in reason
    ok, reason = check_bounds("oracle", runs("oracle", 0.0, 0.0, reason="wrong answer"), 1.0)
    assert not ok and "wrong answer" not in reason  # only a hang is worth naming
