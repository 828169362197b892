"""forge train --backend verl: the main_ppo command line, and overrides checked against veRL's config."""

from __future__ import annotations

import pytest

from openforgerl.errors import ConfigError
from openforgerl.train.verl.launch import AGENT_LOOP_KEY, AGENT_LOOPS, PRESETS, check_overrides, verl_command

pytest.importorskip("verl", reason="needs the train extra (veRL 0.9.1)")
pytest.importorskip("hydra", reason="needs the train extra (hydra-core)")


def test_the_command_runs_main_ppo_on_a_preset_with_the_forge_agent_loop_registered():
    command = verl_command(None, ["trainer.total_epochs=2"], python="python")
    assert command == ["python", "-m", "verl.trainer.main_ppo", "--config-path", str(PRESETS),
                       "--config-name", "grpo_one_harness", f"{AGENT_LOOP_KEY}={AGENT_LOOPS}", "trainer.total_epochs=2"]
    mine = verl_command(PRESETS / "grpo_multi_harness.yaml", [f"{AGENT_LOOP_KEY}=/x.yaml"], python="python")
    assert mine[-3:] == ["--config-name", "grpo_multi_harness", f"{AGENT_LOOP_KEY}=/x.yaml"]


def test_an_unknown_override_key_is_one_line_naming_it_and_the_way_to_add_it():
    check_overrides(None, ["trainer.total_epochs=2", "actor_rollout_ref.rollout.n=4", "model_engine=dp",
                           "++actor_rollout_ref.rollout.custom.forge=1", "hydra.run.dir=out"])
    with pytest.raises(ConfigError) as raised:
        check_overrides(None, ["trainer.total_epochs=2", "actor_rollout_ref.rollout.nn=4"])
    message = str(raised.value)
    assert "\n" not in message and "actor_rollout_ref.rollout.nn" in message
    assert "did you mean actor_rollout_ref.rollout.n?" in message and "++actor_rollout_ref.rollout.nn=4" in message


def test_the_presets_are_grpo_with_rollout_correction_fed_by_the_recorded_logprobs():
    from openforgerl.train.verl.launch import compose

    for preset in ("grpo_one_harness", "grpo_multi_harness"):
        config = compose(PRESETS / f"{preset}.yaml")
        rollout = config["actor_rollout_ref"]["rollout"]
        assert config["algorithm"]["adv_estimator"] == "grpo" and config["trainer"]["use_v1"] is True
        assert rollout["mode"] == "async" and rollout["calculate_log_probs"] is True
        assert rollout["agent"]["default_agent_loop"] == "forge_agent"
        assert config["algorithm"]["rollout_correction"]["rollout_is"] == "token"
