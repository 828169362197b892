import subprocess
import sys


def forge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openforgerl", *args], capture_output=True, text=True, timeout=120)


def test_tasks_validate_prints_problems_and_exits_1(make_task):
    good = make_task("good")
    bad = make_task("bad", '[task]\ndomain = "web"\n')
    result = forge("tasks", "validate", str(good), str(bad))
    assert result.returncode == 1
    assert "task.domain" in result.stdout and "gui, claw, code" in result.stdout
    assert "1 of 2 task(s) valid" in result.stderr
    assert forge("tasks", "validate", str(good)).returncode == 0


def test_help_lists_the_commands():
    out = forge("--help")
    assert out.returncode == 0
    for command in ("tasks",):
        assert command in out.stdout


def test_serve_weights_loads_a_checkpoint_into_the_running_server_or_says_how_to_start_one(tmp_path, monkeypatch,
                                                                                          capsys):
    from types import SimpleNamespace

    import pytest

    from openforgerl.cli import main
    from openforgerl.models.registry import write_checkpoint_marker
    from openforgerl.serving import vllm

    checkpoint = tmp_path / "checkpoints" / "step-3"
    checkpoint.mkdir(parents=True)
    write_checkpoint_marker(checkpoint, "smollm2", step=3)
    monkeypatch.setattr(vllm, "running_server", lambda: None)
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--weights", str(checkpoint)])
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 1 and len(err.splitlines()) == 1
    assert "forge serves none" in err and "forge serve --model smollm2" in err

    loads = []
    record = SimpleNamespace(model="smollm2", url="http://127.0.0.1:8000/v1", pid=1)
    monkeypatch.setattr(vllm, "running_server", lambda: record)
    monkeypatch.setattr(vllm, "reload_weights", lambda url, weights: loads.append((url, weights)) or 0.5)
    main(["serve", "--weights", str(checkpoint)])
    assert loads == [("http://127.0.0.1:8000/v1", checkpoint.resolve())]
    assert capsys.readouterr().out.strip() == "http://127.0.0.1:8000/v1"
    with pytest.raises(SystemExit):
        main(["serve", "--weights", str(tmp_path)])  # not a checkpoint: one line, nothing loaded
    assert "is not a forge checkpoint" in capsys.readouterr().err and len(loads) == 1
