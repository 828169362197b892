"""export_verl_dataset: published tasks -> rows that veRL's own RLHFDataset loads and hands to the agent loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openforgerl.errors import ConfigError, UserError
from openforgerl.manifest import append_manifest
from openforgerl.testing.tasks import write_task
from openforgerl.train.verl.dataset import TaskSpec, export_verl_dataset

pytest.importorskip("pyarrow", reason="parquet needs the train extra")


def tiny_tokenizer(tmp_path: Path):
    """A word-level Hugging Face tokenizer with a chat template: enough for RLHFDataset's length filter."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<unk>", "<|im_end|>", "user", "Create", "the", "file"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>",
                                        eos_token="<|im_end|>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['role'] }} {{ m['content'] }}<|im_end|>{% endfor %}"
    return tokenizer


def published(tmp_path: Path) -> Path:
    """A build-env manifest publishing two tasks (one of them twice: the last line wins)."""
    manifest = tmp_path / "envs" / "manifest.jsonl"
    for name, domain, image in (("hello", "claw", "reg/hello@sha256:" + "a" * 64),  # files declares no domain
                                ("files", None, "reg/files@sha256:" + "b" * 64)):
        toml = None if domain else f'[task]\nname = "{name}"\n\n[environment]\ndocker_image = "{image}"\n'
        task = write_task(tmp_path / "tasks", name, toml, image=image)
        append_manifest(manifest, {"task": name, "path": str(task), "image": "reg/old@sha256:" + "c" * 64})
        append_manifest(manifest, {"task": name, "path": str(task), "image": image})
    return manifest


def test_a_manifest_becomes_rows_that_verl_s_rlhf_dataset_loads(tmp_path: Path):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    out = export_verl_dataset(published(tmp_path), tmp_path / "train.parquet", harness="react",
                              harness_options={"max_turns": 4}, agent_name="forge_agent")
    dataset = RLHFDataset(data_files=[str(out)], tokenizer=tiny_tokenizer(tmp_path),
                          config=OmegaConf.create({"max_prompt_length": 64, "filter_overlong_prompts": True,
                                                   "filter_overlong_prompts_workers": 1,
                                                   "cache_dir": str(tmp_path / "cache")}))
    rows = [dataset[i] for i in range(len(dataset))]
    assert [row["index"] for row in rows] == [0, 1]
    hello, files = rows
    assert hello["agent_name"] == "forge_agent" and hello["reward_model"] == {"style": "forge", "ground_truth": ""}
    assert hello["raw_prompt"] == [{"role": "user", "content": "Create the file /app/hello.txt containing hi.\n"}]
    assert (hello["data_source"], files["data_source"]) == ("openforgerl/claw", "openforgerl/envs")
    spec = TaskSpec.from_extra_info(hello["extra_info"])
    assert (spec.task, spec.harness, spec.harness_options) == ("hello", "react", {"max_turns": 4})
    assert spec.image == "reg/hello@sha256:" + "a" * 64 and Path(spec.path) == (tmp_path / "tasks" / "hello")


def test_a_multi_harness_dataset_has_one_row_per_task_and_harness_with_one_schema(tmp_path: Path):
    import pyarrow.parquet as pq

    task = write_task(tmp_path / "tasks", "hello")
    out = export_verl_dataset(task, tmp_path / "multi.parquet", harness=["react", "codex"],
                              harness_options={"react": {"max_turns": 4}, "codex": {}})
    table = pq.read_table(out)
    infos = [json.loads(row["forge"]) for row in table.column("extra_info").to_pylist()]
    assert [(i["harness"], i["harness_options"]) for i in infos] == [("react", {"max_turns": 4}), ("codex", {})]
    assert table.schema.field("extra_info").type.num_fields == 2  # index + one JSON string, whatever the harness


def test_a_bad_harness_option_or_output_name_fails_before_anything_is_written(tmp_path: Path):
    task = write_task(tmp_path / "tasks", "hello")
    with pytest.raises(ConfigError, match="harness_options.max_turn"):
        export_verl_dataset(task, tmp_path / "a.parquet", harness="react", harness_options={"max_turn": 4})
    with pytest.raises(UserError, match=r"\.parquet or \*\.jsonl"):
        export_verl_dataset(task, tmp_path / "a.csv", harness="react")
    assert not (tmp_path / "a.parquet").exists()
