"""Running a task's verifier after the agent, from a state the agent could not have prepared.

Invariant: before ``tests/test.sh`` runs, ``/logs/verifier`` and ``/tests`` are deleted and
recreated by root from the task directory on the host, so a reward file or a test script the
agent planted is gone; the verifier runs as root with a fixed PATH and no inherited variables; the
reward is read only from what the verifier wrote in this run (a link there is not followed).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from openforgerl.errors import SandboxError
from openforgerl.rollout.runtime import Sandbox
from openforgerl.tasks import Task
from openforgerl.verifiers.reward import VERIFIER_DIR, Verdict, parse_reward_files

TESTS_DIR = "/tests"
TEST_SH = f"{TESTS_DIR}/test.sh"
VERIFIER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The verifier's PATH, whatever the image or the agent set: only system directories."""
REWARD_MAX_BYTES = 16 * 1024 * 1024


def verifier_command(env: dict[str, str]) -> list[str]:
    """``bash /tests/test.sh`` in an environment of its own: nothing inherited but what the task sets."""
    return ["env", "-i", f"PATH={VERIFIER_PATH}", "HOME=/root", "LANG=C.UTF-8",
            *(f"{key}={value}" for key, value in env.items()), "bash", TEST_SH]


async def run_verifier(sandbox: Sandbox, task: Task, timeout: float, workdir: str = "/app",
                       files: dict[str, str] | None = None, env: dict[str, str] | None = None) -> Verdict:
    """``files``: name -> text written into the fresh ``/logs/verifier`` before the verifier runs (what the
    host knows and the agent could not have written, e.g. the rollout's transcript); ``env``: variables
    for this verifier only (the judge relay's URL and token), over the task's [verifier] env."""
    try:
        await sandbox.make_dirs([VERIFIER_DIR, TESTS_DIR], fresh=True)
        await sandbox.make_dirs([workdir])
    except SandboxError as exc:
        return Verdict(None, error=str(exc))
    await sandbox.put(task.tests_dir, "/")
    if files:
        await _put_files(sandbox, files)
    result = await sandbox.exec(verifier_command({**task.config.verifier.env, **(env or {})}), user="0",
                                timeout=timeout, cwd=workdir)
    if result.timed_out:
        return Verdict(None, error=f"verifier timed out after {timeout:.0f} s", timed_out=True,
                       seconds=result.seconds, stdout=result.stdout, stderr=result.stderr)
    verdict = await _read_reward(sandbox)
    verdict.seconds, verdict.stdout, verdict.stderr = result.seconds, result.stdout, result.stderr
    if verdict.error and result.exit_code != 0:
        verdict.error += f" (test.sh exit {result.exit_code}: {result.tail(300)})"
        verdict.signal = signal_of(result.exit_code)
    return verdict


def signal_of(exit_code: int | None) -> int | None:
    """The signal an exit code says ended the process: a shell's 128 + N, or Python's -N."""
    if exit_code is None:
        return None
    if 128 < exit_code <= 128 + 64:
        return exit_code - 128
    return -exit_code if -64 <= exit_code < 0 else None


async def _put_files(sandbox: Sandbox, files: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="forge-verifier-in-") as tmp:
        folder = Path(tmp) / Path(VERIFIER_DIR).name
        folder.mkdir()
        for name, text in files.items():
            (folder / Path(name).name).write_text(text, encoding="utf-8")
        await sandbox.put(folder, str(Path(VERIFIER_DIR).parent))


async def _read_reward(sandbox: Sandbox) -> Verdict:
    with tempfile.TemporaryDirectory(prefix="forge-verdict-") as tmp:
        try:
            copied = await sandbox.get(VERIFIER_DIR, Path(tmp), max_bytes=REWARD_MAX_BYTES)
        except Exception as exc:  # the directory vanished: the verifier (or something) removed it
            return Verdict(None, error=f"{VERIFIER_DIR} is gone after the verifier ran: {exc}")
        folder = Path(tmp) / Path(VERIFIER_DIR).name
        verdict = parse_reward_files(folder)
        if verdict.error and copied.skipped:
            verdict.error += f" ({VERIFIER_DIR} held what is not a regular file: {', '.join(copied.skipped[:3])})"
        return verdict
