"""forge export sft|rs: run directories -> token-exact SFT rows, and veRL's SFT trainer reading them back."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from click.testing import CliRunner
from omegaconf import OmegaConf

from openforgerl.cli import _register, cli, main
from openforgerl.errors import UserError
from openforgerl.rollout.orchestrator import RolloutResult
from openforgerl.rollout.trajectory import CallRecord, Trajectory
from openforgerl.testing.chat import CharTemplate
from openforgerl.train.export import export_sft
from openforgerl.train.sft_dataset import ForgeSFTDataset

TEMPLATE = CharTemplate()
SYSTEM = "<|im_start|>system\nYou are an agent.<|im_end|>\n"
FORCED = "<tool_call>\n"
CALL = '{"name": "shell", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>'
RESULT = "\n<|im_start|>user\n<tool_response>\nhello.txt\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
DONE = "All done.<|im_end|>"


def call(index: int, segment: int, prompt: str, response: str, forced: str = "") -> CallRecord:
    ids = TEMPLATE.encode(response)
    return CallRecord(index=index, status="ok", kind="clean", segment=segment, prompt_suffix=TEMPLATE.encode(prompt),
                      forced=TEMPLATE.encode(forced), response=ids, logprobs=[-0.5] * len(ids))


def recorded(rollout_id: str, task: str = "hello") -> Trajectory:
    """Two segments the way the proxy records them: a tool call with forced tokens and its result, then a fork."""
    trajectory = Trajectory(rollout_id, metadata={"task": task, "model": "smollm2"})
    trajectory.add(call(0, 0, SYSTEM + "<|im_start|>user\nList files.<|im_end|>\n<|im_start|>assistant\n",
                        CALL, forced=FORCED))
    trajectory.add(call(1, 0, RESULT, DONE))
    trajectory.add(call(2, 1, SYSTEM + "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n", "hi<|im_end|>"))
    return trajectory


def write_run(root: Path, rollouts: list[tuple[str, float | None]], *, saved: bool = True) -> list[Trajectory]:
    """A run directory as ``forge rollout`` writes one: config.yaml, rollouts.jsonl, trajectories/<id>.json."""
    (root / "trajectories").mkdir(parents=True)
    (root / "config.yaml").write_text(yaml.safe_dump({"model": "smollm2", "harness": "react"}))
    trajectories, lines = [], []
    for i, (status, reward) in enumerate(rollouts):
        trajectory = recorded(f"{root.name}-{i}", task=f"task-{i}")
        trajectory.status, trajectory.reward = "running", None  # rollouts.jsonl has the run's final word
        path = f"trajectories/{trajectory.rollout_id}.json" if saved else None
        if path:
            (root / path).write_text(json.dumps(trajectory.to_dict()))
        lines.append(RolloutResult(trajectory.rollout_id, f"task-{i}", 0, "react", status, reward,  # type: ignore[arg-type]
                                   trajectory=path).to_json())
        trajectories.append(trajectory)
    (root / "rollouts.jsonl").write_text("".join(line + "\n" for line in lines))
    return trajectories


def char_decoder(model: str) -> CharTemplate:
    assert model == "smollm2"
    return TEMPLATE


def read(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    return pq.read_table(path).to_pylist()


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_rows_are_the_recorded_ids_with_only_sampled_tokens_in_the_loss(tmp_path: Path, suffix: str):
    [trajectory] = write_run(tmp_path / "run", [("success", 1.0)])
    out = tmp_path / f"sft{suffix}"
    export = export_sft([tmp_path / "run"], out, "sft", decoder_for=char_decoder)
    rows = read(out)
    assert (export.rollouts, export.rows, export.left_out_line()) == (1, 2, None)
    for row, segment in zip(rows, trajectory.segments, strict=True):
        assert row["input_ids"] == segment.prompt_ids + segment.response_ids
        assert row["loss_mask"] == [0] * len(segment.prompt_ids) + segment.response_mask
        assert (row["reward"], row["status"], row["task"]) == (1.0, "success", "task-0")
    first = rows[0]
    trained = [i for i, m in zip(first["input_ids"], first["loss_mask"], strict=True) if m]
    assert TEMPLATE.decode(trained, False) == CALL + DONE  # not the prompt, the forced <tool_call>, or the result
    assert [(m["role"], m["content"]) for m in first["messages"]] == [
        ("system", "You are an agent."), ("user", "List files."), ("assistant", FORCED + CALL[:-len("<|im_end|>")]),
        ("user", "<tool_response>\nhello.txt\n</tool_response>"), ("assistant", "All done.")]


def test_sft_leaves_out_rollouts_that_say_nothing_about_the_policy(tmp_path: Path):
    write_run(tmp_path / "a", [("success", 1.0), ("failure", 0.0), ("agent_timeout", None)])
    write_run(tmp_path / "b", [("infra_error", None), ("verifier_error", None), ("failure", 0.0)])
    export = export_sft([tmp_path / "a", tmp_path / "b"], tmp_path / "sft.jsonl", decoder_for=char_decoder)
    assert {row["rollout_id"] for row in read(tmp_path / "sft.jsonl")} == {"a-0", "a-1", "b-2"}
    assert export.left_out_line() == "left out 3 of 6 rollouts: 1 agent_timeout, 1 infra_error, 1 verifier_error"


def test_rs_keeps_every_segment_of_the_rollouts_that_reach_the_reward(tmp_path: Path):
    write_run(tmp_path / "run", [("success", 1.0), ("failure", 0.0), ("failure", 0.5), ("infra_error", None)])
    export = export_sft([tmp_path / "run"], tmp_path / "rs.jsonl", "rs", decoder_for=char_decoder)
    assert [(r["rollout_id"], r["segment"]) for r in read(tmp_path / "rs.jsonl")] == [("run-0", 0), ("run-0", 1)]
    assert export.left_out_line() == "left out 3 of 4 rollouts: 2 reward below 1, 1 infra_error"
    export_sft([tmp_path / "run"], tmp_path / "rs.jsonl", "rs", min_reward=0.5, decoder_for=char_decoder)
    assert {r["rollout_id"] for r in read(tmp_path / "rs.jsonl")} == {"run-0", "run-2"}


def test_without_the_policy_tokenizer_rows_stay_token_exact_and_messages_are_left_out(tmp_path: Path):
    write_run(tmp_path / "run", [("success", 1.0)])

    def not_pulled(model: str) -> CharTemplate:
        raise UserError(f"model {model!r} is not pulled", fix=f"forge model pull {model}")

    export = export_sft([tmp_path / "run"], tmp_path / "sft.jsonl", decoder_for=not_pulled)
    assert [row["messages"] for row in read(tmp_path / "sft.jsonl")] == [None, None]
    assert export.notes == ["messages left out for model smollm2: model 'smollm2' is not pulled; "
                            "fix: forge model pull smollm2"]


def test_bad_input_is_one_line_naming_the_path_and_the_fix(tmp_path: Path):
    (tmp_path / "not-a-run").mkdir()
    write_run(tmp_path / "no-trajectories", [("success", 1.0)], saved=False)
    write_run(tmp_path / "failed", [("failure", 0.0)])
    cases = [(tmp_path / "not-a-run", "sft", "holds no rollouts.jsonl"),
             (tmp_path / "no-trajectories", "sft", "holds no trajectories"),
             (tmp_path / "failed", "rs", "nothing to export")]
    for run, kind, what in cases:
        with pytest.raises(UserError) as caught:
            export_sft([run], tmp_path / "out.jsonl", kind, decoder_for=char_decoder)  # type: ignore[arg-type]
        assert str(run) in str(caught.value) and what in str(caught.value) and caught.value.fix
    with pytest.raises(UserError, match="jsonl or"):
        export_sft([tmp_path / "failed"], tmp_path / "out.csv")


def test_forge_export_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    write_run(tmp_path / "run", [("success", 1.0), ("infra_error", None)])
    _register()
    result = CliRunner().invoke(cli, ["export", "sft", str(tmp_path / "run"), "--out", str(tmp_path / "x.parquet")])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"1 rollouts, 2 rows -> {tmp_path / 'x.parquet'}"
    assert result.stderr.splitlines()[0] == "left out 1 of 2 rollouts: 1 infra_error"
    assert "messages left out for model smollm2" in result.stderr  # no model is pulled in unit tests
    with pytest.raises(SystemExit) as exit_:
        main(["export", "rs", str(tmp_path / "empty"), "--out", str(tmp_path / "x.jsonl")])
    assert exit_.value.code == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"UserError: {tmp_path / 'empty'} is not a directory; fix: ")


# --- veRL's SFT trainer reading the export ------------------------------------------------------------------

def verl_create_sft_dataset() -> Any:
    """veRL's own ``create_sft_dataset``. Importing verl.trainer.sft_trainer needs veRL's GPU-training
    dependencies (torchdata, peft, ...) that the CPU environment lacks; then the function's own source is
    compiled out of that file (it needs only ``MultiTurnSFTDataset`` beside it)."""
    try:
        from verl.trainer.sft_trainer import create_sft_dataset
    except ImportError:
        pass
    else:
        return create_sft_dataset
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    spec = importlib.util.find_spec("verl.trainer.sft_trainer")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    [function] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "create_sft_dataset"]
    namespace: dict[str, Any] = {"MultiTurnSFTDataset": MultiTurnSFTDataset}
    exec(compile(ast.Module([function], []), spec.origin, "exec"), namespace)
    return namespace["create_sft_dataset"]


def verl_data_config(**overrides: Any) -> Any:
    """The ``data`` section of veRL's sft_trainer_engine.yaml, pointed at our dataset class."""
    spec = importlib.util.find_spec("verl.trainer")
    assert spec is not None and spec.submodule_search_locations
    config = OmegaConf.load(Path(spec.submodule_search_locations[0]) / "config" / "sft_trainer_engine.yaml").data
    config.custom_cls.path, config.custom_cls.name = "pkg://openforgerl.train.sft_dataset", "ForgeSFTDataset"
    for key, value in overrides.items():
        OmegaConf.update(config, key, value)
    return config


TOKENIZER = SimpleNamespace(pad_token_id=257)


def test_verl_sft_trainer_trains_exactly_the_sampled_tokens(tmp_path: Path):
    from verl.utils import tensordict_utils
    from verl.utils.dataset.dataset_utils import SFTTensorCollator
    from verl.workers.utils.losses import sft_loss

    [trajectory] = write_run(tmp_path / "run", [("success", 1.0)])
    export_sft([tmp_path / "run"], tmp_path / "sft.parquet", decoder_for=char_decoder)
    config = verl_data_config(max_length=4096)
    dataset = verl_create_sft_dataset()([str(tmp_path / "sft.parquet")], config, TOKENIZER, None)
    assert isinstance(dataset, ForgeSFTDataset) and len(dataset) == 2
    batch = SFTTensorCollator(config.pad_mode)([dataset[0], dataset[1]])
    for i, segment in enumerate(trajectory.segments):
        assert batch["input_ids"][i].tolist() == segment.prompt_ids + segment.response_ids
        assert batch["loss_mask"][i].tolist() == [0] * len(segment.prompt_ids) + segment.response_mask
        assert batch["position_ids"][i].tolist() == list(range(len(segment)))
    # veRL's log_prob[t] scores token t+1; make it minus that token's id: the loss is then the mean id of the
    # tokens sft_loss trains on, which must be exactly the sampled ones.
    ids = batch["input_ids"]
    log_probs = torch.nested.nested_tensor_from_jagged(-torch.roll(ids.values(), -1).double(), offsets=ids.offsets())
    sampled = [t for s in trajectory.segments for t, m in zip(s.response_ids, s.response_mask, strict=True) if m]
    data = tensordict_utils.get_tensordict({"loss_mask": batch["loss_mask"]}, {
        "dp_size": 1, "batch_num_tokens": len(sampled), "pad_mode": config.pad_mode})
    loss, _ = sft_loss(None, {"log_probs": log_probs}, data)
    assert loss.item() == pytest.approx(sum(sampled) / len(sampled))


def test_max_length_truncation_and_right_padding_follow_verl(tmp_path: Path):
    [trajectory] = write_run(tmp_path / "run", [("success", 1.0)])
    export_sft([tmp_path / "run"], tmp_path / "sft.jsonl", decoder_for=char_decoder)
    segment = trajectory.segments[0]
    ids, mask = segment.ids(), [0] * len(segment.prompt_ids) + segment.response_mask
    create = verl_create_sft_dataset()
    with pytest.raises(UserError, match="longer than data.max_length=20") as caught:
        create(str(tmp_path / "sft.jsonl"), verl_data_config(max_length=20), TOKENIZER, None)
    assert caught.value.fix == f"raise data.max_length to {len(ids)} or set data.truncation=left or right"
    left = create(str(tmp_path / "sft.jsonl"), verl_data_config(max_length=20, truncation="left"), TOKENIZER, None)
    assert (left[0]["input_ids"].tolist(), left[0]["loss_mask"].tolist()) == (ids[-20:], mask[-20:])
    assert left[0]["position_ids"].tolist() == list(range(20))
    right = create(str(tmp_path / "sft.jsonl"), verl_data_config(max_length=20, truncation="right"), TOKENIZER, None)
    assert right[0]["input_ids"].tolist() == ids[:20]
    padded = create(str(tmp_path / "sft.jsonl"), verl_data_config(max_length=len(ids) + 3, pad_mode="right"),
                    TOKENIZER, None)[0]
    assert padded["input_ids"].tolist() == ids + [257] * 3
    assert padded["attention_mask"].tolist() == [1] * len(ids) + [0] * 3
    assert padded["loss_mask"].tolist() == mask + [0] * 3
    with pytest.raises(UserError, match="data.pad_mode=left_right is not supported"):
        create(str(tmp_path / "sft.jsonl"), verl_data_config(pad_mode="left_right"), TOKENIZER, None)


def test_max_samples_and_files_that_are_not_an_export(tmp_path: Path):
    write_run(tmp_path / "run", [("success", 1.0), ("failure", 0.0)])
    export_sft([tmp_path / "run"], tmp_path / "sft.parquet", decoder_for=char_decoder)
    config = verl_data_config(max_length=4096)
    assert len(ForgeSFTDataset([str(tmp_path / "sft.parquet")], TOKENIZER, config, max_samples=3)) == 3
    (tmp_path / "chat.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(UserError, match=r"chat.jsonl:1: not a forge export row") as caught:
        ForgeSFTDataset(str(tmp_path / "chat.jsonl"), TOKENIZER, config)
    assert caught.value.fix and "forge export" in caught.value.fix
