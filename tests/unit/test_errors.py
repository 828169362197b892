import errno

import pytest

from openforgerl.errors import (ConfigError, ForgeError, ResourceError, TaskFormatError, UnknownNameError,
                                UserError, map_os_errors)


def test_message_carries_the_fix_on_one_line():
    err = ConfigError("run.yaml: agent.timeout_sec: not a number", fix="write seconds as a number")
    assert str(err) == "run.yaml: agent.timeout_sec: not a number; fix: write seconds as a number"
    assert "\n" not in str(err)
    assert isinstance(err, UserError) and isinstance(err, ForgeError)


def test_unknown_name_lists_known_names_sorted():
    err = UnknownNameError("model", "gpt-9", ["smollm2", "qwen"])
    assert "unknown model 'gpt-9'" in str(err)
    assert "use one of: qwen, smollm2" in str(err)


def test_task_format_error_lists_every_problem():
    err = TaskFormatError("task x is invalid", ["a: b: c: d", "e: f: g: h"])
    assert str(err).splitlines()[1:] == ["  a: b: c: d", "  e: f: g: h"]


def test_no_space_becomes_resource_error_naming_what_we_did():
    with pytest.raises(ResourceError, match="no space left on device while writing the model") as info:
        with map_os_errors("writing the model"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert isinstance(info.value.__cause__, OSError)


def test_other_os_errors_pass_through():
    with pytest.raises(FileNotFoundError):
        with map_os_errors("reading"):
            raise FileNotFoundError(errno.ENOENT, "gone")
