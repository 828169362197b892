"""synth_report.json: what a synthesis run made, what it threw away and why, and how varied the result is.

Sections: ``run`` (the resolved config, seed, proposer and model, prompt hashes, assets with their
sha256, seconds, CPU seconds per stage, the model's tokens), ``funnel`` (candidates that passed each
stage, overall and per family, asset and difficulty), ``rejections`` (reason code -> count and up to
three example ids), ``dedup`` (parameters, exact duplicates per signature, clusters with their kept
member and similarity), ``diversity`` (families, their Shannon entropy against its maximum,
distinct first verbs, distinct-2 over the instructions, mean pairwise char 5-gram Jaccard of the
kept set), ``difficulty`` and ``tasks`` (every candidate's record, as in candidates.jsonl).

Invariant: the report is a pure function of the candidates' records and the config; every number
in it can be recomputed from candidates.jsonl.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openforgerl.synth.candidate import STAGES
from openforgerl.synth.dedup import jaccard, shingles

if TYPE_CHECKING:
    from openforgerl.synth.pipeline import Synthesizer

PAIR_SAMPLE = 400
"""Kept sets larger than this have their mean pairwise similarity estimated on a fixed sample."""


def synth_report(synth: Synthesizer, manifest: Path | None) -> dict[str, Any]:
    records = [*synth.resumed.values(), *(c.record() for c in synth.candidates.values())]
    records = list({r["id"]: r for r in records}.values())
    kept = [r for r in records if r["decision"] == "kept"]
    llm = synth.llm
    return {
        "run": {"config": synth.config.model_dump(mode="json"), "seed": synth.config.seed,
                "proposer": synth.config.proposer, "model": synth.config.llm.model if llm else None,
                "prompt_hashes": sorted({r["prompt_hash"] for r in records if r.get("prompt_hash")}),
                "assets": [{"name": s.asset.name, "domain": s.asset.domain, "sha256": s.asset.sha256}
                           for s in {id(s.asset): s for s in synth.slots}.values()],
                "families": sorted({s.family.name for s in synth.slots}),
                "seconds": round(time.monotonic() - synth.started, 2),
                "cpu_seconds": _cpu_seconds(records),
                "llm": {"calls": llm.usage.calls, "prompt_tokens": llm.usage.prompt_tokens,
                        "completion_tokens": llm.usage.completion_tokens} if llm else None,
                "out": str(synth.out), "manifest": str(manifest) if manifest else None},
        "funnel": funnel(records),
        "rejections": rejections(records),
        "dedup": dedup_section(records, synth.near.params()),
        "diversity": diversity([r["instruction"] or "" for r in kept], [r["family"] for r in kept]),
        "difficulty": dict(Counter(r.get("difficulty") or "unknown" for r in kept)),
        "kept": len(kept),
        "tasks": records,
    }


def reached(record: dict[str, Any]) -> int:
    """Index in STAGES of the last stage the candidate passed."""
    return STAGES.index(record["stage"]) if record["stage"] in STAGES else 0


def funnel(records: list[dict[str, Any]]) -> dict[str, Any]:
    def counts(rows: list[dict[str, Any]]) -> dict[str, int]:
        return {stage: sum(reached(r) >= i for r in rows) for i, stage in enumerate(STAGES)}

    overall = counts(records)
    proposed = overall["proposed"] or 1
    kept = sum(r["decision"] == "kept" for r in records)
    out: dict[str, Any] = {"overall": overall, "kept": kept, "yield": round(kept / proposed, 4)}
    for key in ("family", "asset", "difficulty"):
        groups: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            groups.setdefault(str(record.get(key)), []).append(record)
        out[f"by_{key}"] = {name: {**counts(rows), "kept": sum(r["decision"] == "kept" for r in rows)}
                            for name, rows in sorted(groups.items())}
    return out


def rejections(records: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        if record["decision"] != "rejected":
            continue
        entry = found.setdefault(record["reason_code"], {"count": 0, "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < 3:
            entry["examples"].append({"id": record["id"], "reason": record["reason"]})
    return dict(sorted(found.items(), key=lambda item: -item[1]["count"]))


def dedup_section(records: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    codes = Counter(r["reason_code"] for r in records if (r.get("reason_code") or "").startswith("dedup."))
    clusters: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        duplicate = (record.get("reason_code") or "").startswith("dedup.")
        if record.get("cluster") and (record["decision"] == "kept" or duplicate):
            clusters.setdefault(record["cluster"], []).append(record)
    groups = [{"kept": kept, "size": len(rows), "members": [r["id"] for r in rows],
               "max_similarity": max((r.get("max_jaccard") or 0.0 for r in rows if r["id"] != kept), default=0.0)}
              for kept, rows in sorted(clusters.items()) if len(rows) > 1]
    kept = [r for r in records if r["decision"] == "kept"]
    similarities = [r["max_jaccard"] for r in kept if r.get("max_jaccard") is not None]
    return {"params": params, "exact": {"task_sig": codes.get("dedup.task_sig", 0),
                                         "verifier_sig": codes.get("dedup.verifier_sig", 0)},
            "near": codes.get("dedup.near", 0), "clusters": groups,
            "cluster_sizes": dict(Counter(g["size"] for g in groups)),
            "kept_max_jaccard": max(similarities, default=None),
            "kept_mean_max_jaccard": round(sum(similarities) / len(similarities), 4) if similarities else None}


def diversity(instructions: list[str], families: list[str]) -> dict[str, Any]:
    counts = Counter(families)
    total = sum(counts.values())
    entropy = -sum(c / total * math.log(c / total) for c in counts.values()) if total else 0.0
    words = [instruction.split() for instruction in instructions]
    bigrams = [tuple(w[i:i + 2]) for w in words for i in range(len(w) - 1)]
    sets = [shingles(text) for text in instructions]
    pairs = list(itertools.combinations(range(len(sets)), 2))
    if len(sets) > PAIR_SAMPLE:
        pairs = random.Random(0).sample(pairs, PAIR_SAMPLE * 10)
    mean = sum(jaccard(sets[a], sets[b]) for a, b in pairs) / len(pairs) if pairs else None
    return {"families": len(counts), "family_entropy": round(entropy, 4),
            "family_entropy_max": round(math.log(len(counts)), 4) if counts else 0.0,
            "first_verbs": len({w[0].lower().strip(".,:") for w in words if w}),
            "distinct_2": round(len(set(bigrams)) / len(bigrams), 4) if bigrams else None,
            "mean_pairwise_jaccard": round(mean, 4) if mean is not None else None}


def _cpu_seconds(records: list[dict[str, Any]]) -> dict[str, float]:
    totals: Counter[str] = Counter()
    for record in records:
        totals.update(record.get("seconds") or {})
    return {stage: round(seconds, 3) for stage, seconds in totals.items()}
