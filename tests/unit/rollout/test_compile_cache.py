"""The warm-up an install runs for a harness that ships a Node compile cache, with a stand-in CLI.

The stand-in CLI is a script in the build's ``node_modules/.bin`` that asks the model named in its config (as
OpenClaw does) and writes the answer where Node would write its cache: the warm-up must serve it a model with
no network, keep the cache it left for root and for the agent user, and drop a cache whose turn failed.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from openforgerl.rollout.harness import COMPILE_CACHE, AgentContext, Harness, HarnessPackage, Invocation
from openforgerl.rollout.harnesses.install import CACHE_UIDS, warm_compile_cache

CLI = """#!/usr/bin/env python3
import json, os, sys, urllib.request
config = json.load(open(sys.argv[2]))
request = urllib.request.Request(config["base_url"] + "/v1/chat/completions", method="POST",
                                 data=json.dumps({"model": "m", "messages": [], "stream": False}).encode(),
                                 headers={"Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(request, timeout=30))["choices"][0]["message"]["content"]
cache = os.path.join(os.environ["NODE_COMPILE_CACHE"], f"v24.0.0-x64-abcd1234-{os.getuid()}")
os.makedirs(cache, exist_ok=True)
open(os.path.join(cache, "0badc0de"), "w").write(answer)
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


class FakeCli(Harness):
    name = "fake-cli"
    package = HarnessPackage("npm", "fake-cli@1.0.0", "fake-cli", compile_cache=True)

    def __init__(self, exit_code: int = 0) -> None:
        super().__init__()
        self.exit_code = exit_code

    def invocation(self, ctx: AgentContext) -> Invocation:
        config = f"{ctx.home}/config.json"
        return Invocation([self.launcher(), "--config", config, ctx.instruction], {"FAKE_EXIT": str(self.exit_code)},
                          {config: f'{{"base_url": "{ctx.base_url}"}}'})


@pytest.fixture
def build(tmp_path: Path) -> Path:
    cli = tmp_path / "build" / "node_modules" / ".bin" / "fake-cli"
    cli.parent.mkdir(parents=True)
    cli.write_text(CLI)
    cli.chmod(0o755)
    return tmp_path / "build"


def test_the_warm_up_serves_a_model_offline_and_keeps_the_cache_for_root_and_the_agent_user(build: Path):
    assert warm_compile_cache(FakeCli(), build)
    cache = build / COMPILE_CACHE
    made = {path.name for path in cache.iterdir()}
    assert made == {f"v24.0.0-x64-abcd1234-{uid}" for uid in {*CACHE_UIDS, os.getuid()}}
    for uid_dir in cache.iterdir():
        entry = uid_dir / "0badc0de"
        assert entry.read_text() == "Done."  # the stand-in model answered the CLI's call
        assert stat.S_IMODE(entry.stat().st_mode) == 0o644 and stat.S_IMODE(uid_dir.stat().st_mode) == 0o755
    assert not (build / ".forge-check").exists()  # the turn's HOME and workdir are not shipped


def test_a_failed_warm_up_leaves_no_cache_and_says_so(build: Path, caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING):
        assert not warm_compile_cache(FakeCli(exit_code=3), build)
    assert not (build / COMPILE_CACHE).exists() and not (build / ".forge-check").exists()
    assert "fake-cli will start without a compile cache" in caplog.text and "exit 3" in caplog.text


def test_a_harness_that_ships_a_cache_points_its_node_at_the_layers_copy():
    env = FakeCli().compile_cache_env()
    assert env == {"NODE_COMPILE_CACHE": f"/opt/forge/tools/fake-cli/{COMPILE_CACHE}",
                   "NODE_COMPILE_CACHE_PORTABLE": "1"}
    plain = type("Plain", (FakeCli,), {"package": HarnessPackage("npm", "plain@1", "plain")})
    assert plain().compile_cache_env() == {}
