"""Near-duplicate detection: LSH proposes, exact Jaccard decides, and it agrees with all-pairs Jaccard."""

from __future__ import annotations

import random

from openforgerl.synth.dedup import NearDuplicates, exact_clusters, jaccard, lsh_clusters, shingles

WORDS = ("milk bread eggs coffee tea rice apples cheese butter flour sugar salt pepper onions garlic lemons "
         "tomatoes pasta beans carrots").split()
TEMPLATES = [
    "Add {q} {a} to the shopping list named {n}.",
    "In the booking app, reserve room {q} for {a} and {b} on 2026-03-{d:02d}.",
    "Write the total of the {a} column of /app/data/{n}.csv into /app/out/{b}.json.",
    "Rename the contact {a} {b} to {b} {a} and set their phone to 555-01{d:02d}.",
    "Mark every to-do that mentions {a} as done, then delete the one titled '{b} {n}'.",
    "Send a mail to {a}@example.test with subject '{b} report {q}' and the body from /app/notes/{n}.md.",
]


def instructions(n: int, seed: int = 0) -> list[str]:
    """Generated instructions of several templates, with planted near-verbatim copies (case, spacing, a word)."""
    rng = random.Random(seed)
    texts: list[str] = []
    while len(texts) < n:
        if texts and rng.random() < 0.3:
            base = rng.choice(texts)
            texts.append(base.replace(" the ", " the  ").upper() if rng.random() < 0.5 else base + " Thanks!")
            continue
        texts.append(rng.choice(TEMPLATES).format(q=rng.randrange(1, 300), a=rng.choice(WORDS), b=rng.choice(WORDS),
                                                  n=f"{rng.choice(WORDS)}-{rng.randrange(1000)}", d=rng.randrange(1, 29)))
    return texts


def test_lsh_finds_exactly_the_clusters_of_all_pairs_jaccard_on_300_instructions():
    texts = instructions(300)
    lsh, exact = lsh_clusters(texts), exact_clusters(texts)
    assert lsh.groups == exact.groups
    assert lsh.pairs == exact.pairs  # every pair at or above 0.7 found, none invented
    assert sum(len(g) > 1 for g in exact.groups) > 20  # the planted copies are there to be found
    assert lsh.params["b"] * lsh.params["r"] <= 128


def test_normalisation_makes_case_and_spacing_copies_identical():
    a, b = "Add 3 milk to the list.", "  ADD 3   milk to THE list. "
    assert jaccard(shingles(a), shingles(b)) == 1.0


def test_the_incremental_kept_set_answers_like_exact_jaccard():
    texts = instructions(120, seed=5)
    lsh, exact = NearDuplicates(), NearDuplicates(use_lsh=False)
    assert lsh.method == "minhash-lsh" and exact.method == "exact-jaccard"
    for i, text in enumerate(texts):
        found, expected = lsh.duplicate_of(text), exact.duplicate_of(text)
        assert (found[0] is None) == (expected[0] is None), (i, text)  # the same decision
        if found[0] is None:
            lsh.add(str(i), text)
            exact.add(str(i), text)
    assert len(lsh.keys) == len(exact.keys) < len(texts)
