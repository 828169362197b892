"""Writing a candidate as a task directory (Harbor layout plus our tables).

Invariant: the directory is written aside and moved into place whole, the same candidate always
gives byte-identical files (no dates, no absolute host paths), and every task of one asset has a
byte-identical ``environment/`` (the asset's build context; build-env renders the Dockerfile from
the template and builds one image per asset).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from openforgerl.synth.assets import Asset
from openforgerl.synth.candidate import Candidate
from openforgerl.tasks import (
    AgentTable,
    EnvironmentTable,
    MetadataTable,
    ProvenanceTable,
    SourceAsset,
    TaskConfig,
    TaskTable,
    save_task_config,
)
from openforgerl.verifiers.compile import compile_verifier

SOLVE_HEADER = "#!/bin/bash\nset -euo pipefail\n"


def task_config(candidate: Candidate, asset: Asset, *, proposer_model: str | None = None,
                agent_timeout_sec: float = 600.0) -> TaskConfig:
    draft = candidate.draft
    assert draft is not None
    return TaskConfig(
        metadata=MetadataTable(difficulty=draft.difficulty, category=candidate.family,
                               tags=[candidate.domain, asset.name, candidate.family]),
        task=TaskTable(name=candidate.id, domain=asset.domain, needed_actions=draft.needed_actions),
        agent=AgentTable(timeout_sec=agent_timeout_sec),
        environment=EnvironmentTable(template=asset.config.template, template_params=asset.config.template_params,
                                     state_stores=asset.config.state.stores),
        provenance=ProvenanceTable(sources=[SourceAsset(path=f"{asset.domain}/{asset.name}", sha256=asset.sha256)],
                                   proposer_model=proposer_model, prompt_hash=candidate.prompt_hash,
                                   dedup_cluster=candidate.cluster, dedup_max_jaccard=candidate.max_jaccard),
    )


def render_task(candidate: Candidate, asset: Asset, folder: Path, *, proposer_model: str | None = None) -> Path:
    """Fill ``folder`` (new or empty) with the task; returns it."""
    draft = candidate.draft
    assert draft is not None
    folder.mkdir(parents=True, exist_ok=True)
    save_task_config(folder, task_config(candidate, asset, proposer_model=proposer_model))
    (folder / "instruction.md").write_text(draft.instruction.rstrip() + "\n", encoding="utf-8")
    asset.write_environment(folder / "environment")
    compile_verifier(draft.spec, folder / "tests")
    solve = folder / "solution" / "solve.sh"
    solve.parent.mkdir(parents=True, exist_ok=True)
    body = draft.solution if draft.solution.startswith("#!") else SOLVE_HEADER + draft.solution
    solve.write_text(body.rstrip() + "\n", encoding="utf-8")
    solve.chmod(0o755)
    for relative, text in sorted(draft.files.items()):
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return folder


def write_task(candidate: Candidate, asset: Asset, out: Path, *, proposer_model: str | None = None) -> Path:
    """The task at ``out/<candidate id>``, written aside and moved in whole (replacing an earlier copy)."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / candidate.id
    with tempfile.TemporaryDirectory(prefix=f".{candidate.id}-", dir=out) as tmp:
        staged = render_task(candidate, asset, Path(tmp) / candidate.id, proposer_model=proposer_model)
        if target.exists():
            shutil.rmtree(target)
        staged.replace(target)
    return target
