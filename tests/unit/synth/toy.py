"""A toy asset and family for the synth core's tests (the real ones live in openforgerl/synth/families)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from openforgerl.synth.assets import Asset, load_asset
from openforgerl.synth.family import Family, TaskDraft

ASSET_TOML = """name = "toy"
domain = "claw"
description = "A folder of notes."
template = "claw"
families = ["claw.toy.copy"]

[template_params]
has_files = true

[environment]
files = "files"

[state]
copy = { files = "/app" }
"""
NOTES = {"alpha.txt": "first note\n", "beta.txt": "second note\n", "gamma.txt": "third note\n"}


def toy_asset(root: Path) -> Asset:
    (root / "files").mkdir(parents=True, exist_ok=True)
    for name, text in NOTES.items():
        (root / "files" / name).write_text(text)
    (root / "asset.toml").write_text(ASSET_TOML)
    return load_asset(root)


class CopyNote(Family):
    """Copy one note into /app/out/<target>: the verifier compares the content."""

    name = "claw.toy.copy"
    domain = "claw"

    def __init__(self, instruction: str | None = None, verifier_blind: bool = False) -> None:
        self.instruction, self.verifier_blind = instruction, verifier_blind

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        notes = sorted(p.name for p in (state / "app").glob("*.txt"))
        return {"note": rng.choice(notes), "target": f"copy-{rng.randrange(1000):03d}.txt"}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if not (state / "app" / str(params.get("note"))).is_file():
            return f"there is no note {params.get('note')!r} in the workspace"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        note, target = params["note"], params["target"]
        text = (state / "app" / note).read_text().strip()
        spec = {"type": "file_contains", "path": f"/app/out/{target}", "text": "note" if self.verifier_blind else text}

        def oracle(root: Path) -> None:
            (root / "app" / "out").mkdir(parents=True, exist_ok=True)
            (root / "app" / "out" / target).write_text((root / "app" / note).read_text())

        def wrong_note(root: Path) -> None:
            other = next(p for p in sorted((root / "app").glob("*.txt")) if p.name != note)
            (root / "app" / "out").mkdir(parents=True, exist_ok=True)
            (root / "app" / "out" / target).write_text(other.read_text())

        return TaskDraft(title=f"Copy {note}", required_literals=[note, f"/app/out/{target}"],
                         instruction=self.instruction or f"Copy the note {note} to /app/out/{target}.",
                         spec=spec, solution=f"mkdir -p /app/out\ncp /app/{note} /app/out/{target}\n",
                         oracle=oracle, failure_cases={"wrong_note": wrong_note}, needed_actions=["write"])
