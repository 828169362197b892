"""RL that learns on one CPU machine: forge train --backend local on SmolLM2-135M with the react harness.

The task family (``touch-file``, generated here): "Create the file /app/<name>.txt (any content will do).
Call write_file with path /app/<name>.txt." The verifier (root, after the agent) gives 1 when that file
exists, else 0; nop scores 0 and the reference solution 1. The harness forces a write_file call every turn
(``tool_choice=write_file``), so what the policy writes is the call's JSON arguments: SmolLM2-135M gets
the keys and the path right only sometimes (it copies the tool schema, invents keys, drops ``content``).
Train and held-out tasks use disjoint file names.

Protocol: evaluate the held-out tasks (``--eval-n`` rollouts each) on the starting policy; train
``--steps`` GRPO steps on the train tasks; evaluate the held-out tasks again on the trained policy (the
server holds the last checkpoint's weights). Goal: held-out success after >= 2x before, or +0.20 absolute,
within 60 minutes on 2 cores. Writes bench/results/train_cpu.md and the reward curve train_cpu.png.

Run (needs forge stack up, forge serve, forge harness install react):
    .venv/bin/python bench/train_cpu.py [--steps 12] [--group-size 6] [--train-tasks 6] [--heldout 6]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openforgerl.models.registry import require_pulled  # noqa: E402
from openforgerl.rollout.orchestrator import RolloutConfig, final_tries  # noqa: E402
from openforgerl.rollout.run import run_rollouts  # noqa: E402
from openforgerl.serving.vllm import reload_weights  # noqa: E402
from openforgerl.testing.tasks import write_task  # noqa: E402
from openforgerl.train.local import LocalTrainConfig, LocalTrainer  # noqa: E402

NAMES = ["notes", "todo", "report", "draft", "summary", "log", "plan", "list", "memo", "index", "ideas", "agenda",
         "budget", "receipt", "invoice", "letter", "journal", "recipe", "score", "output"]
TEST_SH = """#!/bin/bash
if [ -f /app/{name}.txt ]; then r=1; else r=0; fi
printf '{{"reward": %s}}\\n' "$r" > /logs/verifier/reward.json
"""
HARNESS_OPTIONS = {"tool_choice": "write_file", "max_turns": 2, "max_tokens": 48, "temperature": 1.0}
RESULTS = Path(__file__).parent / "results"


def make_tasks(root: Path, names: list[str]) -> list[str]:
    paths = []
    for name in names:
        instruction = (f"Create the file /app/{name}.txt (any content will do). "
                       f"Call write_file with path /app/{name}.txt.\n")
        paths.append(str(write_task(root, f"touch-{name}", instruction=instruction,
                                    test_sh=TEST_SH.format(name=name),
                                    solution=f"#!/bin/bash\necho done > /app/{name}.txt\n", agent_timeout=120)))
    return paths


def success_rate(tasks: list[str], n: int, run_dir: Path, base_url: str, concurrency: int) -> dict[str, float]:
    config = RolloutConfig(tasks=tasks, harness="react", harness_options=HARNESS_OPTIONS, attempts=n,
                           concurrency=concurrency, run_dir=str(run_dir),
                           proxy={"engine": {"type": "vllm", "base_url": base_url.removesuffix("/v1")}})
    started = time.monotonic()
    _, results = asyncio.run(run_rollouts(config))
    results = final_tries(results)
    policy = [r for r in results if r.status in ("success", "failure", "agent_timeout")]
    wins = sum(r.status == "success" for r in policy)
    return {"success": wins / max(1, len(policy)), "wins": wins, "rollouts": len(policy),
            "infra": len(results) - len(policy), "seconds": time.monotonic() - started}


HEADER = ("| step | reward | success | trained samples | loss | ppo_kl | clip | grad norm | entropy | response tokens "
          "| logprob mismatch | served mismatch | rollout s | update s | save+sync s |\n" + "|---" * 15 + "|")


def table_row(label: str, r: dict) -> str:
    return f"| {label} | {r['success']:.3f} | {r['wins']} / {r['rollouts']} | {r['infra']} | {r['seconds']:.0f} |"


def plot(history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [m["step"] for m in history]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(steps, [m["reward_mean"] for m in history], marker="o", label="train reward (mean of the step's group)")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--group-size", type=int, default=6)
    parser.add_argument("--train-tasks", type=int, default=6)
    parser.add_argument("--heldout", type=int, default=6)
    parser.add_argument("--eval-n", type=int, default=6)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--work", default="runs/bench-train-cpu")
    parser.add_argument("--only-base", action="store_true", help="measure the starting success rate and stop")
    args = parser.parse_args()

    work = Path(args.work) / time.strftime("%Y%m%d-%H%M%S")
    train_names = NAMES[:args.train_tasks]
    heldout_names = NAMES[len(NAMES) - args.heldout:]
    assert not set(train_names) & set(heldout_names)
    train_tasks = make_tasks(work / "train-tasks", train_names)
    heldout_tasks = make_tasks(work / "heldout-tasks", heldout_names)
    reload_weights(args.base_url, require_pulled("smollm2"))  # start from the pulled weights
    started = time.monotonic()
    before = success_rate(heldout_tasks, args.eval_n, work / "eval-before", args.base_url, args.concurrency)
    print(f"held-out before: {before}", flush=True)
    if args.only_base:
        return
    config = LocalTrainConfig(tasks=train_tasks, harness="react", harness_options=HARNESS_OPTIONS,
                              steps=args.steps, group_size=args.group_size, out=str(work / "train"), lr=args.lr,
                              server_url=args.base_url, rollout={"concurrency": args.concurrency})

    def on_step(m: dict) -> None:
        print(f"step {m['step']}: reward {m['reward_mean']:.3f} success {m['success_rate']:.2f} "
              f"trained {m['trained_samples']} loss {m['loss']:+.4f} grad {m['grad_norm']:.2f} "
              f"rollout {m['rollout_s']:.0f}s update {m['update_s']:.0f}s sync {m['save_s'] + m['sync_s']:.1f}s",
              flush=True)

    train_started = time.monotonic()
    history = LocalTrainer(config, on_step=on_step).run()
    train_s = time.monotonic() - train_started
    after = success_rate(heldout_tasks, args.eval_n, work / "eval-after", args.base_url, args.concurrency)
    total_s = time.monotonic() - started
    print(f"held-out after: {after}", flush=True)
    reload_weights(args.base_url, require_pulled("smollm2"))  # leave the server as found

    RESULTS.mkdir(exist_ok=True)
    plot(history, RESULTS / "train_cpu.png")
    ratio = after["success"] / before["success"] if before["success"] else float("inf")
    met = after["success"] >= 2 * before["success"] or after["success"] - before["success"] >= 0.20
    rows = "\n".join(
        f"| {m['step']} | {m['reward_mean']:.3f} | {m['success_rate']:.2f} | {m['trained_samples']} | "
        f"{m['loss']:+.4f} | {m['ppo_kl']:+.5f} | {m['clip_frac']:.3f} | {m['grad_norm']:.2f} | {m['entropy']:.3f} | "
        f"{m['tokens_response']} | {m['logprob_mismatch_mean']:.1e} | {m['served_mismatch']:.1e} | "
        f"{m['rollout_s']:.0f} | {m['update_s']:.0f} | {m['save_s'] + m['sync_s']:.1f} |" for m in history)
    gain = after["success"] - before["success"]
    split = {k: statistics.mean(m[k] for m in history) for k in ("rollout_s", "update_s", "save_s", "sync_s")}
    text = f"""# RL that learns on one CPU machine (`bench/train_cpu.py`)

Machine: 2 cores, no GPU; {time.strftime('%Y-%m-%d')}. Policy SmolLM2-135M-Instruct (fp32, vLLM CPU), react harness
with `{json.dumps(HARNESS_OPTIONS)}`, task family `touch-file` (see the script's docstring), {len(train_tasks)} train
tasks, {len(heldout_tasks)} held-out tasks (disjoint names), {args.steps} steps x group {args.group_size} per task,
lr {args.lr}, veRL's GRPO advantage / vanilla clipped loss / token-mean aggregation.

## Held-out success (the goal: after >= 2x before, or +0.20 absolute, within 60 minutes)

| | success | wins / rollouts | infra | seconds |
|---|---|---|---|---|
{table_row("before training", before)}
{table_row(f"after {args.steps} steps", after)}

**ratio after / before: {ratio:.2f}x, +{gain:.3f} absolute: goal {'met' if met else 'NOT met'}**;
wall time of the whole protocol {total_s / 60:.1f} min (training alone {train_s / 60:.1f} min; goal 60 min).

![reward curve](train_cpu.png)

## Per step

{HEADER}
{rows}

Time split per step (mean): rollouts {split['rollout_s']:.1f} s, update {split['update_s']:.1f} s, checkpoint save
{split['save_s']:.1f} s, weight load into vLLM {split['sync_s']:.1f} s.
"""
    (RESULTS / "train_cpu.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
