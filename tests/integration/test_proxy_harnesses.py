"""Real harness CLIs through the real ``forge proxy`` (scripted engine): each one creates a file.

Codex CLI speaks Responses, Claude Code Messages, opencode Chat Completions. Each run happens in
its own network namespace (``unshare -n``) holding only a loopback, with the proxy inside it, so
nothing can leave the machine. We check what a user would notice (the file is there) and what
training needs (one clean segment per conversation whose model tokens are exactly the engine's).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from openforgerl.paths import tools_dir
from openforgerl.rollout.proxy.engine import ScriptedEngineConfig
from openforgerl.rollout.proxy.engines.scripted import ScriptedEngine
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.testing.proxy import policy_template

pytestmark = pytest.mark.harness

PORT = 18800
DONE = {"text": "Done: hello.txt contains hi."}
HARNESSES = {
    "codex": ([{"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo hi > hello.txt"}}]}, DONE],
              """mkdir -p "$HOME/.codex"; printf '%s\\n' 'model = "smollm2"' 'model_provider = "forge"' \\
                   '[model_providers.forge]' 'name = "forge"' "base_url = \\"$URL/v1\\"" 'env_key = "FORGE_KEY"' \\
                   'wire_api = "responses"' > "$HOME/.codex/config.toml"
                 CODEX_HOME="$HOME/.codex" FORGE_KEY=$KEY "$BIN/codex" exec --skip-git-repo-check \\
                   --dangerously-bypass-approvals-and-sandbox "create a file hello.txt containing hi" </dev/null"""),
    "claude": ([{"tool_calls": [{"name": "Bash", "arguments": {"command": "echo hi > hello.txt",
                                                                "description": "write the file"}}]}, DONE],
               """ANTHROPIC_BASE_URL=$URL ANTHROPIC_API_KEY=$KEY CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \\
                  IS_SANDBOX=1 DISABLE_AUTOUPDATER=1 "$BIN/claude" -p "create a file hello.txt containing hi" \\
                  --model smollm2 --dangerously-skip-permissions </dev/null"""),
    "opencode": ([{"text": "Create hello.txt"},  # opencode's first call asks for a title
                  {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi > hello.txt",
                                                                 "description": "write the file"}}]}, DONE],
                 """OPENCODE_CONFIG_CONTENT="{\\"provider\\": {\\"forge\\": {\\"npm\\": \\"@ai-sdk/openai-compatible\\",
                    \\"name\\": \\"forge\\", \\"options\\": {\\"baseURL\\": \\"$URL/v1\\", \\"apiKey\\": \\"$KEY\\"},
                    \\"models\\": {\\"smollm2\\": {\\"name\\": \\"smollm2\\"}}}}, \\"model\\": \\"forge/smollm2\\",
                    \\"permission\\": {\\"bash\\": \\"allow\\", \\"edit\\": \\"allow\\"}}" OPENCODE_DISABLE_MODELS_FETCH=1 \\
                    "$BIN/opencode" run --model forge/smollm2 "create a file hello.txt containing hi" </dev/null"""),
}


def can_unshare() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-n", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    policy_template().tokenizer.save_pretrained(str(directory))
    return directory


@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_a_real_harness_creates_a_file_through_the_proxy(harness, tmp_path, tokenizer_dir):
    binary = tools_dir() / "bin" / ("claude" if harness == "claude" else harness)
    if not binary.exists():
        pytest.skip(f"{binary} is not installed (forge harness install {harness})")
    if not can_unshare():
        pytest.skip("no network namespaces here (unshare -n) to keep the harness off the network")
    turns, command = HARNESSES[harness]
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"turns": turns}))
    (tmp_path / "work").mkdir()
    (tmp_path / "home").mkdir()
    (tmp_path / "harness.sh").write_text(textwrap.dedent(command))
    script = textwrap.dedent(f"""\
        set -u; ip link set lo up; cd {tmp_path}
        {sys.executable} -m openforgerl proxy --engine scripted --script script.yaml --port {PORT} \\
          --admin-token adminadmin --data-dir data --tokenizer {tokenizer_dir} > proxy.log 2>&1 &
        for i in $(seq 1 240); do curl -s 127.0.0.1:{PORT}/health > /dev/null && break; sleep 0.5; done
        curl -s -X POST 127.0.0.1:{PORT}/rollouts -H "authorization: Bearer adminadmin" > created.json
        export KEY=$(python3 -c "import json; print(json.load(open('created.json'))['token'])")
        export HOME={tmp_path}/home URL=http://127.0.0.1:{PORT} BIN={binary.parent}
        cd work && timeout 240 bash ../harness.sh > ../harness.log 2>&1; echo "rc=$?" >> ../harness.log
        cd .. && curl -s 127.0.0.1:{PORT}/rollouts/$(python3 -c "import json; print(json.load(open('created.json'))['id'])")/trajectory \\
          -H "authorization: Bearer adminadmin" > trajectory.json
        kill %1
        """)
    subprocess.run(["unshare", "-n", "bash", "-c", script], timeout=400, check=False)
    log = (tmp_path / "harness.log").read_text()
    assert (tmp_path / "work" / "hello.txt").read_text().strip() == "hi", log[-3000:]
    trajectory = json.loads((tmp_path / "trajectory.json").read_text())
    assert all(c["status"] == "ok" for c in trajectory["calls"]) and trajectory["counts"]["realigned"] == 0
    # the conversation that did the work is one segment: the tool-call turn, then the final answer
    template = policy_template()
    engine = ScriptedEngine(ScriptedEngineConfig.model_validate({"turns": turns}), template=template,
                            tool_parser=make_tool_parser("hermes"))
    expected = [t for turn in engine.config.turns[-2:] for t in engine.turn_ids(turn)]
    segment = trajectory["segments"][-1]
    assert [t for t, m in zip(segment["response_ids"], segment["response_mask"]) if m] == expected
    assert "<tool_response>" in template.decode(segment["response_ids"], False)
