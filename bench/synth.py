"""Synthesis benchmark: dedup against bare datasketch, procedural throughput, and the LLM proposer's funnel.

- Dedup (``dedup.lsh_clusters``: MinHash LSH proposing, exact Jaccard deciding, union-find) against
  bare datasketch on the same shingles (``MinHash.bulk`` + ``MinHashLSH`` insert/query, same b and r),
  both timed in this run at 1k / 10k / 100k instructions (generated from templates, 30 % planted
  near-verbatim copies). Goal: <= 1.5x. Precision and recall against the planted copies at every size,
  and against all-pairs exact Jaccard at 1k.
- Procedural throughput: candidates per minute through the host filters and the dry run
  (``forge synth --no-build``; those kept after dedup shown beside), per domain, one process.
  Goals: >= 50/min gui and claw, >= 10/min code.
- With ``--llm URL``: the LLM proposer's funnel (forge serve's SmolLM2 by default).

- With ``--build N``: N procedural tasks per domain through the real build-env; goal >= 95 % pass.

Run: .venv/bin/python bench/synth.py [--sizes 1000,10000,100000] [--build 20] [--llm http://127.0.0.1:8000/v1]
Writes bench/results/synth.md.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openforgerl.synth.dedup import exact_clusters, lsh_clusters, lsh_threshold, shingles  # noqa: E402

WORDS = ("milk bread eggs coffee tea rice apples cheese butter flour sugar salt pepper onions garlic lemons "
         "tomatoes pasta beans carrots invoice receipt budget travel rent salary laptop printer monitor desk").split()
TEMPLATES = [
    "Add {q} {a} to the shopping list named {n}.",
    "In the booking app, reserve room {q} for {a} and {b} on 2026-03-{d:02d}.",
    "Write the total of the {a} column of /app/data/{n}.csv into /app/out/{b}.json.",
    "Rename the contact {a} {b} to {b} {a} and set their phone to 555-01{d:02d}.",
    "Mark every to-do that mentions {a} as done, then delete the one titled '{b} {n}'.",
    "Send a mail to {a}@example.test with subject '{b} report {q}' and the body from /app/notes/{n}.md.",
    "Move every .{a} file under /app/inbox into /app/sorted/{b}/ and list them in /app/out/{n}.txt.",
    "Set the key {a}_{b} in section [{n}] of /app/config/app.ini to {q}, leaving every other key as it is.",
]


def corpus(n: int, seed: int = 0) -> tuple[list[str], set[tuple[int, int]]]:
    """Instructions and the planted (original, copy) pairs: templates filled from a 400-word vocabulary,
    so unrelated instructions of one template share their frame (about 0.3-0.5 similar), as a family's do."""
    rng = random.Random(seed)
    vocabulary = WORDS + ["".join(rng.choice("aeioubcdfghklmnprstvz") for _ in range(rng.randrange(4, 9)))
                          for _ in range(400 - len(WORDS))]
    texts: list[str] = []
    planted: set[tuple[int, int]] = set()
    while len(texts) < n:
        if texts and rng.random() < 0.3:
            base = rng.randrange(len(texts))
            texts.append(texts[base].upper() if rng.random() < 0.5 else texts[base] + " Thanks!")
            planted.add((base, len(texts) - 1))
            continue
        texts.append(rng.choice(TEMPLATES).format(q=rng.randrange(1, 10_000), a=rng.choice(vocabulary),
                                                  b=rng.choice(vocabulary), d=rng.randrange(1, 29),
                                                  n=f"{rng.choice(vocabulary)}-{rng.randrange(100_000)}"))
    return texts, planted


def bare_datasketch(sets: list[set[str]], threshold: float) -> int:
    from datasketch import MinHash, MinHashLSH

    hashes = MinHash.bulk([[s.encode() for s in sorted(one)] for one in sets], num_perm=128, seed=1)
    lsh = MinHashLSH(threshold=lsh_threshold(threshold), num_perm=128)
    proposed = 0
    for i, minhash in enumerate(hashes):
        proposed += len(lsh.query(minhash))
        lsh.insert(i, minhash)
    return proposed


def dedup_rows(sizes: list[int]) -> list[str]:
    warm, _ = corpus(300, seed=1)  # imports and first-call costs out of both timings
    bare_datasketch([shingles(t) for t in warm], 0.7)
    lsh_clusters(warm)
    rows = []
    for n in sizes:
        texts, planted = corpus(n)
        sets = [shingles(t) for t in texts]
        started = time.perf_counter()
        bare_datasketch(sets, 0.7)
        bare = time.perf_counter() - started
        started = time.perf_counter()
        ours = lsh_clusters(texts)
        total = time.perf_counter() - started
        started = time.perf_counter()
        [shingles(t) for t in texts]
        shingling = time.perf_counter() - started
        stage = total - shingling  # lsh_clusters shingles its input; bare got the shingles ready-made
        found = set(ours.pairs)
        pairs_of_planted = {tuple(sorted(p)) for p in planted}
        in_same = {p for p in pairs_of_planted if _same_group(ours.groups, p)}
        recall = len(in_same) / len(pairs_of_planted)
        exact_note = "-"
        if n <= 2_000:
            exact = exact_clusters(texts)
            true = found & set(exact.pairs)
            exact_note = (f"pairs equal: {set(exact.pairs) == found}; precision {len(true) / max(len(found), 1):.3f}, "
                          f"recall {len(true) / max(len(exact.pairs), 1):.3f}")
        goal = "met" if stage / bare <= 1.5 else "NOT met"
        rows.append(f"| {n:,} | {bare:.2f} s | {stage:.2f} s (+ shingling {shingling:.2f} s) | {stage / bare:.2f}x | "
                    f"<= 1.5x: {goal} | {recall:.3f} | {exact_note} |")
    return rows


def _same_group(groups: list[list[int]], pair: tuple[int, ...]) -> bool:
    for group in groups:
        if pair[0] in group:
            return pair[1] in group
    return False


def throughput_rows(domains: list[str], n: int) -> list[str]:
    from openforgerl.synth.pipeline import SynthConfig, synthesize

    rows = []
    for domain in domains:
        with tempfile.TemporaryDirectory(prefix="forge-bench-synth-") as tmp:
            started = time.perf_counter()
            result = asyncio.run(synthesize(SynthConfig(domain=domain, n=n, out=str(Path(tmp) / "out"), build=False)))
            seconds = time.perf_counter() - started
        kept = len(result.kept)
        through = result.report["funnel"]["overall"]["dry_run"]  # passed every host filter, the dry run last
        per_minute = through / seconds * 60
        goal = 10 if domain == "code" else 50
        rows.append(f"| {domain} | {len(result.candidates)} proposed, {through} through the dry run, {kept} kept "
                    f"after dedup | {seconds:.1f} s | {per_minute:.0f}/min ({kept / seconds * 60:.0f}/min kept) | "
                    f">= {goal}/min: {'met' if per_minute >= goal else 'NOT met'} |")
    return rows


def build_rows(domains: list[str], n: int) -> list[str]:
    """Procedural candidates that passed the dry run, through the real build-env (Docker nop/oracle)."""
    from openforgerl.synth.pipeline import SynthConfig, synthesize

    rows = []
    for domain in domains:
        with tempfile.TemporaryDirectory(prefix="forge-bench-synth-build-") as tmp:
            started = time.perf_counter()
            config = SynthConfig(domain=domain, n=n, seed=11, out=str(Path(tmp) / "out"),
                                 build_env={"push": False, "repeats": 1, "rounds": 0})
            result = asyncio.run(synthesize(config))
            seconds = time.perf_counter() - started
        built = [c for c in result.candidates if c.build]
        passed = sum(bool(c.build.get("passed")) for c in built)
        rate = passed / len(built) if built else 0.0
        failures = "; ".join(f"{c.id}: {c.reason}"[:160] for c in built if not c.build.get("passed")) or "-"
        verdict = "met" if rate >= 0.95 else "NOT met"
        rows.append(f"| {domain} | {passed} of {len(built)} | {rate:.0%} | >= 95%: {verdict} | {seconds:.0f} s "
                    f"| {failures} |")
    return rows


def llm_rows(url: str, n: int) -> list[str]:
    from openforgerl.synth.llm import LlmSettings
    from openforgerl.synth.pipeline import SynthConfig, synthesize

    rows = []
    for domain, mode in (("claw", "params"), ("gui", "params"), ("claw", "freeform")):
        with tempfile.TemporaryDirectory(prefix="forge-bench-synth-llm-") as tmp:
            started = time.perf_counter()
            result = asyncio.run(synthesize(SynthConfig(domain=domain, n=n, out=str(Path(tmp) / "out"), build=False,
                                                        proposer="llm", llm=LlmSettings(base_url=url, mode=mode),
                                                        max_proposals=4 * n)))
            seconds = time.perf_counter() - started
        report = result.report
        funnel = report["funnel"]["overall"]
        reworded = sum("model's wording" in " ".join(c.notes) for c in result.candidates)
        stages = " -> ".join(f"{stage.replace('_', ' ')} {funnel[stage]}"
                             for stage in ("schema", "grounding", "literals", "dry_run"))
        rows.append(f"| {report['run']['model']} | {domain} | {mode} | {funnel['proposed']} proposed -> {stages} -> "
                    f"kept {report['kept']} (in the model's words: {reworded}) | {seconds:.0f} s | "
                    + ", ".join(f"{code} {entry['count']}" for code, entry in report["rejections"].items()) + " |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--domains", default="gui,claw,code")
    parser.add_argument("-n", type=int, default=30, help="tasks kept per domain for the throughput run")
    parser.add_argument("--build", type=int, default=0, help="tasks per domain through the real build-env")
    parser.add_argument("--llm", default=None, help="OpenAI-compatible URL for the LLM proposer's funnel")
    args = parser.parse_args()
    lines = ["# Synthesis benchmark", "", f"`python bench/synth.py`, {time.strftime('%Y-%m-%d')}, 2-core machine.", "",
             "## Dedup: ours vs bare datasketch (same shingles, num_perm 128, same LSH b and r)", "",
             "| instructions | bare datasketch | ours | ratio | goal | recall of planted copies | vs exact Jaccard |",
             "|---|---|---|---|---|---|---|", *dedup_rows([int(s) for s in args.sizes.split(",")]), ""]
    domains = [d for d in args.domains.split(",") if d]
    if domains:
        lines += ["## Procedural throughput (propose + host filters + dry run, one process)", "",
                  "| domain | candidates | time | through the dry run per minute | goal |", "|---|---|---|---|---|",
                  *throughput_rows(domains, args.n), ""]
    if args.build:
        lines += ["## build-env pass rate of procedural candidates that passed the dry run (real Docker)", "",
                  "| domain | passed | rate | goal | time | failures |", "|---|---|---|---|---|---|",
                  *build_rows(domains, args.build), ""]
    if args.llm:
        lines += ["## LLM proposer funnel", "", "| model | domain | mode | funnel | time | rejections |",
                  "|---|---|---|---|---|---|", *llm_rows(args.llm, 5), ""]
    text = "\n".join(lines)
    print(text)
    (Path(__file__).parent / "results" / "synth.md").write_text(text)


if __name__ == "__main__":
    main()
