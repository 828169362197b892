"""Runtimes against a real Docker engine (and the local process runtime)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from openforgerl.errors import SandboxError
from openforgerl.rollout.runtime import LABEL_RUN, SandboxSpec
from openforgerl.rollout.runtimes import docker as docker_runtime_module
from openforgerl.rollout.runtimes import make_runtime
from openforgerl.rollout.runtimes.docker import DockerRuntimeConfig
from openforgerl.rollout.runtimes.local import LocalRuntimeConfig

BASE = "openforgerl/base:bookworm"


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def docker_runtime():
    from openforgerl.containers.client import docker_client

    docker_client()  # fails loudly (with the fix) when the engine is down
    runtime = make_runtime(DockerRuntimeConfig())
    run(runtime.reach({"isolated"}))  # its network, as a rollout makes it (this file alone, on a fresh machine)
    return runtime


def spec(**kw) -> SandboxSpec:
    return SandboxSpec(image=BASE, labels={LABEL_RUN: "pytest-runtimes"}, **kw)


@pytest.mark.docker
def test_container_is_hardened_labelled_and_removed(docker_runtime):
    async def go():
        async with docker_runtime.sandbox(spec(cpus=1, memory_mb=256, pids_limit=64)) as box:
            box.container.reload()
            attrs = box.container.attrs["HostConfig"]
            assert attrs["CapDrop"] == ["ALL"] and "NET_RAW" not in attrs["CapAdd"]
            assert attrs["SecurityOpt"] == ["no-new-privileges"]
            assert attrs["Memory"] == 256 * 2**20 and attrs["PidsLimit"] == 64 and attrs["NanoCpus"] == 10**9
            assert attrs["NetworkMode"] == "openforgerl-isolated"
            assert box.container.labels[LABEL_RUN] == "pytest-runtimes"
            result = await box.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
            assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
            user = await box.exec(["id", "-u"], user="1000:1000")
            assert user.stdout.strip() == "1000"
            return box.container
    container = run(go())
    import docker.errors
    with pytest.raises(docker.errors.NotFound):
        container.reload()


@pytest.mark.docker
def test_timeout_kills_the_whole_process_tree(docker_runtime):
    async def go():
        async with docker_runtime.sandbox(spec()) as box:
            result = await box.exec(["sh", "-c", "sleep 300 & sleep 300 & sleep 300"], timeout=1.5)
            assert result.timed_out and result.exit_code is None and result.seconds < 15
            ps = await box.exec(["sh", "-c", "ps -eo args | grep -c '^sleep 300' || true"])
            assert ps.stdout.strip() == "0"
    run(go())


@pytest.mark.docker
def test_ending_an_unprivileged_agent_kills_its_processes_from_outside_and_keeps_root_s(docker_runtime):
    async def go():
        async with docker_runtime.sandbox(spec()) as box:
            await box.exec(["sh", "-c", "setsid sleep 301 > /dev/null 2>&1 < /dev/null &"])  # a root service
            await box.exec(["sh", "-c", "setsid sleep 302 > /dev/null 2>&1 < /dev/null &"], user="agent")
            # a writer that re-forks itself every few milliseconds, which no single pass over /proc catches
            hop = "h() { sleep 0.005; (h &) ; }; h"
            await box.exec(["bash", "-c", f"setsid bash -c '{hop}' > /dev/null 2>&1 < /dev/null &"], user="agent")
            await box.end_processes("agent")
            left = (await box.exec(["ps", "-eo", "user,args"])).stdout
            assert "sleep 301" in left and "sleep 302" not in left and "agent" not in left
            assert (await box.health()).running
    run(go())


@pytest.mark.docker
def test_a_pause_that_times_out_after_freezing_leaves_the_container_running_for_the_verifier(docker_runtime):
    import requests

    async def go():
        async with docker_runtime.sandbox(spec()) as box:
            await box.exec(["sh", "-c", "setsid sleep 304 > /dev/null 2>&1 < /dev/null &"], user="agent")
            real_pause = box._api.pause

            def pause_then_time_out(container):  # what a loaded daemon did in CI: frozen, but no answer
                real_pause(container)
                raise requests.exceptions.ReadTimeout("read timed out")

            box._api.pause = pause_then_time_out
            await box.end_processes("agent")  # falls back to a restart, which needs the container thawed
            box._api.pause = real_pause
            assert not box._api.inspect_container(box.container.id)["State"]["Paused"]
            assert "sleep 304" not in (await box.exec(["ps", "-eo", "args"])).stdout
    run(go())


@pytest.mark.docker
def test_an_exec_docker_refuses_as_paused_after_forge_unpaused_the_container_runs_once_it_is_thawed(docker_runtime):
    """Docker handles containerd's pause event after the unpause that followed it (a loaded daemon, in CI): it
    marks the running container paused again, until the resume event, and refuses execs ("is paused"). That was
    the verifier's first exec after the agent's processes were ended: a verifier error, not the policy's doing."""
    async def go():
        async with docker_runtime.sandbox(spec()) as box:
            await box.end_processes("agent")
            box._api.pause(box.container.id)  # what Docker reported: paused, after forge's unpause
            assert (await box.exec(["echo", "verified"])).stdout == "verified\n"
            real_start, starts = box._api.exec_start, []

            def pause_then_start(*args, **kwargs):  # the same between an exec's creation and its start
                starts.append(args)
                if len(starts) == 1:
                    box._api.pause(box.container.id)
                return real_start(*args, **kwargs)

            box._api.exec_start = pause_then_start
            assert (await box.exec(["echo", "again"])).stdout == "again\n"
            assert len(starts) == 2  # refused as paused, then started
            assert not box._api.inspect_container(box.container.id)["State"]["Paused"]
    run(go())


@pytest.mark.docker
def test_a_container_that_stays_paused_fails_the_exec_naming_it(docker_runtime, monkeypatch):
    monkeypatch.setattr(docker_runtime_module, "THAW_SECONDS", 1.0)

    async def go():
        async with docker_runtime.sandbox(spec()) as box:
            box._api.pause(box.container.id)
            real_unpause, box._api.unpause = box._api.unpause, lambda container: None  # unpauses that do nothing
            try:
                with pytest.raises(SandboxError, match=f"container {box.id} stays paused 1 s after forge unpaused"):
                    await box.exec(["true"])
            finally:
                real_unpause(box.container.id)
    run(go())


@pytest.mark.docker
def test_ending_a_root_agent_restarts_the_container_and_keeps_its_files(docker_runtime):
    async def go():
        async with docker_runtime.sandbox(spec()) as box:
            await box.exec(["sh", "-c", "echo kept > /root/f; setsid sleep 303 > /dev/null 2>&1 < /dev/null &"])
            await box.end_processes(None)
            assert "sleep 303" not in (await box.exec(["ps", "-eo", "args"])).stdout
            assert (await box.exec(["cat", "/root/f"])).stdout == "kept\n"
            routes = (await box.exec(["cat", "/proc/net/route"])).stdout.splitlines()[1:]
            assert all(line.split()[1] != "00000000" for line in routes)  # still no default route
    run(go())


@pytest.mark.docker
def test_copy_in_and_out(docker_runtime, tmp_path: Path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("echo ok\n")
    async def go():
        async with docker_runtime.sandbox(spec()) as box:
            await box.put(tmp_path / "tests", "/opt/verifier")
            assert (await box.exec(["sh", "/opt/verifier/tests/test.sh"])).stdout == "ok\n"
            await box.exec(["sh", "-c", "mkdir -p /logs && echo 1 > /logs/r.txt"])
            await box.get("/logs/r.txt", tmp_path / "out")
            with pytest.raises(SandboxError, match="does not exist"):
                await box.get("/nope", tmp_path / "out")
    run(go())
    assert (tmp_path / "out" / "r.txt").read_text() == "1\n"


def _as_a_researcher_would_leave_it(*paths: Path) -> None:
    """Host files owned by uid 1000 (our images' agent uid), group and world writable."""
    for path in paths:
        os.chown(path, 1000, 1000)
        path.chmod(0o777 if path.is_dir() else 0o666)


as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving host files to uid 1000 needs root")


@pytest.mark.docker
@as_root
def test_what_forge_puts_into_a_sandbox_is_root_s_whoever_runs_forge(docker_runtime, tmp_path: Path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("echo ok\n")
    _as_a_researcher_would_leave_it(tests, tests / "test.sh")
    async def go():
        async with docker_runtime.sandbox(spec()) as box:
            await box.put(tests, "/")
            owners = await box.exec(["stat", "-c", "%u:%g %a %n", "/tests", "/tests/test.sh"])
            assert owners.stdout == "0:0 755 /tests\n0:0 644 /tests/test.sh\n"
            tamper = "echo 'echo 1 > /logs/verifier/reward.txt' >> /tests/test.sh; touch /tests/conftest.py"
            assert (await box.exec(["sh", "-c", tamper], user="1000:1000")).exit_code != 0
            assert (await box.exec(["cat", "/tests/test.sh"])).stdout == "echo ok\n"
            assert (await box.exec(["ls", "/tests"])).stdout == "test.sh\n"
    run(go())


@pytest.mark.docker
@as_root
def test_a_harness_layer_is_root_s_even_when_a_non_root_user_installed_the_harness(tmp_path: Path):
    import docker

    from openforgerl.rollout.harness_image import _build
    from openforgerl.rollout.harnesses.install import get_package

    tool = "codex"
    launcher = tmp_path / "bin" / get_package(tool).bin
    (tmp_path / tool / "lib").mkdir(parents=True)
    launcher.parent.mkdir()
    (tmp_path / tool / "lib" / "main.js").write_text("console.log('harness')\n")
    launcher.write_text("#!/bin/sh\nexec node /opt/forge/tools/codex/lib/main.js\n")
    _as_a_researcher_would_leave_it(tmp_path / tool, tmp_path / tool / "lib", tmp_path / tool / "lib" / "main.js",
                                    launcher.parent, launcher)
    client = docker.from_env()
    tag = f"openforgerl/harness-test:owner-{os.getpid()}"
    _build(client, client.images.get(BASE).id, tool, tmp_path, tag)
    try:
        script = ("stat -c '%u:%g %a %n' /opt/forge/tools/codex/lib/main.js /opt/forge/tools/bin; "
                  "echo evil > /opt/forge/tools/codex/lib/main.js && echo TAMPERED; "
                  "touch /opt/forge/tools/codex/lib/planted.js && echo TAMPERED; "
                  "echo evil >> /opt/forge/tools/bin/codex && echo TAMPERED; exit 0")
        out = client.containers.run(tag, ["sh", "-c", script], user="1000:1000", network_mode="none",
                                    remove=True).decode()
    finally:
        client.images.remove(tag, force=True)
    assert out.startswith("0:0 644 /opt/forge/tools/codex/lib/main.js\n0:0 755 /opt/forge/tools/bin\n"), out
    assert "TAMPERED" not in out, out


def _fake_install(root: Path, tool: str, compile_cache: bool) -> None:
    """``tool`` as ``installed(root)`` trusts it; ``compile_cache`` alone changes its layer key."""
    import json

    from openforgerl.rollout.harnesses.install import MANIFEST, fingerprint, get_package

    spec = get_package(tool)
    launcher = root / "bin" / spec.bin
    launcher.parent.mkdir(parents=True, exist_ok=True)
    launcher.write_text(f"#!/bin/sh\necho {tool}\n")
    (root / tool).mkdir(exist_ok=True)
    (root / tool / MANIFEST).write_text(json.dumps({
        "name": tool, "package": spec.package, "version": "test", "launcher": str(launcher), "seconds": 0.0,
        "fingerprint": fingerprint(spec), "compile_cache": compile_cache}))


@pytest.mark.docker
def test_a_run_removes_the_harness_layers_its_install_superseded_on_the_same_image(tmp_path: Path):
    import docker
    import docker.errors

    from openforgerl.containers.images import image_exists
    from openforgerl.rollout import harness_image as harness_image_module
    from openforgerl.rollout.harness_image import LABEL_LAYER, harness_image

    client = docker.from_env()
    for n in range(2):  # task images of this test alone, so it touches no other test's layers
        holder = client.containers.create(BASE, ["true"], network_mode="none")
        try:
            holder.commit(repository="openforgerl/harness-test", tag=f"base{n}-{os.getpid()}",
                          changes=[f"LABEL test={os.getpid()}-{n}"])
        finally:
            holder.remove(force=True)
    first, other = (f"openforgerl/harness-test:base{n}-{os.getpid()}" for n in range(2))
    legacy_tag = f"openforgerl/harness-test:legacy-{os.getpid()}"
    built = []
    try:
        holder = client.containers.create(first, ["true"], network_mode="none")  # a layer from before the base label
        holder.commit(repository=legacy_tag.split(":")[0], tag=legacy_tag.split(":")[1],
                      changes=[f"LABEL {LABEL_LAYER}=codex"])
        holder.remove(force=True)
        parent_recorded = bool(client.images.get(legacy_tag).attrs.get("Parent"))  # not by the containerd store
        _fake_install(tmp_path, "codex", compile_cache=False)
        _fake_install(tmp_path, "react", compile_cache=False)
        built += [harness_image(client, first, "codex", root=tmp_path),
                  harness_image(client, first, "react", root=tmp_path),
                  harness_image(client, other, "codex", root=tmp_path)]
        old_codex, react, codex_elsewhere = built
        assert image_exists(client, legacy_tag) != parent_recorded  # superseded by the first codex layer on its image
        in_use = client.containers.create(old_codex, ["true"], network_mode="none")  # e.g. a rollout still running
        _fake_install(tmp_path, "codex", compile_cache=True)  # reinstalled: a new layer key
        harness_image_module._tidied.clear()  # the next forge run
        built.append(harness_image(client, first, "codex", root=tmp_path))
        assert built[-1] != old_codex and image_exists(client, built[-1])
        assert image_exists(client, old_codex)  # a container uses it: kept, not an error
        assert image_exists(client, react) and image_exists(client, codex_elsewhere)  # another tool; another image
        in_use.remove(force=True)
        assert harness_image(client, first, "codex", root=tmp_path) == built[-1]
        assert image_exists(client, old_codex)  # tidied once per run
        harness_image_module._tidied.clear()  # the next run
        assert harness_image(client, first, "codex", root=tmp_path) == built[-1]
        assert not image_exists(client, old_codex)
        assert image_exists(client, react) and image_exists(client, codex_elsewhere) and image_exists(client, built[-1])
    finally:
        for tag in [*built, legacy_tag, first, other]:
            try:
                client.images.remove(tag, force=True)
            except docker.errors.ImageNotFound:
                pass


@pytest.mark.docker
def test_missing_image_and_oom_are_reported(docker_runtime):
    async def go():
        with pytest.raises(SandboxError, match="image openforgerl/does-not-exist:1 is not present locally"):
            await docker_runtime.start(SandboxSpec(image="openforgerl/does-not-exist:1"))
        async with docker_runtime.sandbox(spec(memory_mb=64)) as box:
            hog = await box.exec(["python3", "-c", "x = bytearray(512 * 2**20)"], timeout=60)
            assert hog.exit_code == 137  # SIGKILL from the kernel's OOM killer, not a Python MemoryError
            health = await box.health()
            assert health.running and health.oom_killed and "OOM-killed" in health.detail
    run(go())


@pytest.mark.docker
def test_sweep_removes_containers_of_dead_owners(docker_runtime):
    import docker

    client = docker.from_env()
    orphan = client.containers.run(BASE, ["sleep", "infinity"], detach=True, network_mode="host",
                                   labels={LABEL_RUN: "dead-run", "openforgerl.owner-pid": "999999999",
                                           "openforgerl.owner-host": __import__("socket").gethostname()})
    async def go():
        async with docker_runtime.sandbox(spec()) as live:
            removed = await docker_runtime.sweep()
            assert removed >= 1
            assert (await live.health()).running  # ours (owner alive) is kept
    run(go())
    with pytest.raises(docker.errors.NotFound):
        orphan.reload()


def test_local_runtime_maps_paths_times_out_and_cleans_up(tmp_path: Path):
    runtime = make_runtime(LocalRuntimeConfig(base_dir=str(tmp_path)))
    (tmp_path / "in.txt").write_text("hello")
    async def go():
        async with runtime.sandbox(SandboxSpec(image="unused")) as box:
            await box.put(tmp_path / "in.txt", "/app")
            assert (box.root / "app" / "in.txt").read_text() == "hello"
            done = await box.exec(["sh", "-c", "cat app/in.txt; echo $HOME"])
            assert done.stdout.startswith("hello") and done.stdout.strip().endswith("/home")
            slow = await box.exec(["sh", "-c", "sleep 30 & sleep 30"], timeout=0.5)
            assert slow.timed_out and slow.seconds < 5
            with pytest.raises(SandboxError, match="escapes"):
                box.host_path("../../etc/passwd")
            return box.root
    root = run(go())
    assert not root.exists()
