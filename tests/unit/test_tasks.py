import tomllib
from pathlib import Path

import pytest

from openforgerl.errors import TaskFormatError
from openforgerl.tasks import Task, find_task_dirs, validate_task_dir

HARBOR_TOML = '''version = "1.0"

[metadata]
author_name = "someone"
difficulty = "easy"
category = "programming"
tags = ["shell"]
custom_key = "kept"

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 300.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 2048
storage_mb = 10240
future_option = true
'''


def test_valid_task_loads_with_our_tables(make_task):
    task = Task.load(make_task())
    assert task.name == "hello" and task.domain == "claw"
    assert task.config.agent.timeout_sec == 60
    assert task.instruction.startswith("Create the file /app/hello.txt")
    assert validate_task_dir(task.path) == []


def test_harbor_task_round_trips_unchanged(make_task):
    path = make_task("harbor", HARBOR_TOML)
    before = tomllib.loads((path / "task.toml").read_text())
    task = Task.load(path)
    assert task.domain is None and task.name == "harbor"
    task.save()
    assert tomllib.loads((path / "task.toml").read_text()) == before


def test_our_tables_are_saved_and_reloaded(make_task):
    task = Task.load(make_task("harbor", HARBOR_TOML))
    task.config.validation.passed = True
    task.config.validation.oracle_rewards = [1.0, 1.0]
    task.config.provenance.sources = [{"path": "assets/site.html", "sha256": "a" * 64}]
    task.save()
    again = Task.load(task.path)
    assert again.config.validation.passed is True
    assert again.config.validation.oracle_rewards == [1.0, 1.0]
    assert again.config.provenance.sources[0].path == "assets/site.html"
    assert again.config.metadata.model_extra == {"custom_key": "kept"}


@pytest.mark.parametrize(
    ("toml", "kwargs", "expected"),
    [
        ('[task]\ndomain = "web"\n', {}, "task.domain"),
        ("[agent]\ntimeout_sec = -5\n", {}, "agent.timeout_sec"),
        ("[agent]\ntimeout_sec = 'long'\n", {}, "agent.timeout_sec"),
        ("[provenance]\nsources = [{path = 'x', sha256 = 'nothex'}]\n", {}, "provenance.sources.0.sha256"),
        ("[agent\n", {}, "not valid TOML"),
        ("", {"dockerfile": None}, "environment/Dockerfile: -: missing"),
        ("", {"test_sh": None}, "tests/test.sh: -: missing"),
        ("", {"instruction": "  \n"}, "instruction.md: -: empty"),
        ("[agent]\nwritable_paths = ['usr/lib']\n", {}, "agent.writable_paths: Value error, 'usr/lib' is not an absolute"),
        ("[agent]\nwritable_paths = ['/usr/../../etc']\n", {}, "agent.writable_paths"),
        ("[agent]\nwritable_paths = ['/']\n", {}, "agent.writable_paths"),
        ("[environment]\nnetwork = 'host'\n", {}, "environment.network: Input should be 'isolated', 'bridge' or 'none'"),
        ("[environment]\nnetwork = 'internet'\n", {}, "environment.network: Input should be 'isolated'"),
    ],
)
def test_each_kind_of_invalid_task_is_reported_with_field_and_fix(make_task, toml, kwargs, expected):
    path = make_task("bad", toml, **kwargs)
    problems = validate_task_dir(path)
    assert any(expected in p for p in problems), problems
    for problem in problems:
        # path: field: what is wrong: how to fix
        assert problem.startswith(str(path)) and problem.count(": ") >= 3, problem
    with pytest.raises(TaskFormatError):
        Task.load(path)


def test_every_problem_is_reported_not_just_the_first(make_task):
    path = make_task("bad", '[task]\ndomain = "web"\n', dockerfile=None, test_sh=None)
    assert len(validate_task_dir(path)) == 3


def test_pinned_image_replaces_the_dockerfile(make_task):
    path = make_task("pinned", '[environment]\ndocker_image = "127.0.0.1:5000/x@sha256:' + "b" * 64 + '"\n',
                     dockerfile=None)
    assert validate_task_dir(path) == []


def test_missing_task_toml_and_non_directory(tmp_path: Path, make_task):
    path = make_task("t")
    (path / "task.toml").unlink()
    assert "task.toml: -: missing" in validate_task_dir(path)[0]
    assert "not a directory" in validate_task_dir(tmp_path / "nothing")[0]


def test_find_task_dirs_expands_a_directory_of_tasks(tmp_path: Path, make_task):
    a, b = make_task("a"), make_task("b")
    assert find_task_dirs([tmp_path]) == [a, b]
    assert find_task_dirs([a]) == [a]


def test_a_templated_environment_needs_no_dockerfile_yet(make_task):
    path = make_task("templated", '[environment]\ntemplate = "claw"\n[environment.template_params]\n'
                                  'packages = ["sqlite3"]\n', dockerfile=None)
    assert validate_task_dir(path) == []
    assert Task.load(path).config.environment.template_params == {"packages": ["sqlite3"]}
