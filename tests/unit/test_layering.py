"""The package graph points one way; every import in openforgerl/ (function-level ones too) obeys it.

Rules (from DESIGN.md "Layers"): ``cli`` may import anything and nothing imports ``cli``; the bottom
(tasks, config, errors, paths, log, plugins, manifest, processes) imports only the bottom; ``containers``
imports only the bottom, ``stack`` the bottom and ``containers``; ``verifiers`` imports neither
``rollout`` nor ``envs``; ``rollout`` imports none of ``envs``, ``synth``, ``train``; ``envs`` imports
``rollout`` only to run validation rollouts (``envs.baselines`` -> ``rollout.run``/``orchestrator``);
``synth`` does not import ``train``; the proxy imports only the bottom, ``models`` (its tokenizer)
and ``rollout.trajectory``; ``rollout/trajectory.py`` is pure data. Programs copied into sandboxes
import only the standard library and what their image provides.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "openforgerl"
BOTTOM = ("openforgerl.tasks", "openforgerl.config", "openforgerl.errors", "openforgerl.paths", "openforgerl.log",
          "openforgerl.plugins", "openforgerl.manifest", "openforgerl.processes")


def _under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(base: str, name: str) -> str:
    """``from base import name``: the submodule when ``name`` is one, else ``base`` itself."""
    candidate = f"{base}.{name}"
    path = PACKAGE.parent / candidate.replace(".", "/")
    return candidate if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file() else base


def imports_of(path: Path) -> set[str]:
    """Every openforgerl module ``path`` imports, at any depth of the file."""
    found: set[str] = set()
    package = module_name(path).rsplit(".", 0 if path.name == "__init__.py" else 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found |= {_resolve(base, alias.name) for alias in node.names}
    return {name for name in found if _under(name, "openforgerl")}


def graph() -> dict[str, set[str]]:
    return {module_name(path): imports_of(path) for path in PACKAGE.rglob("*.py")}


def violation(source: str, target: str) -> str | None:
    """Why ``source`` may not import ``target``; None when it may."""
    if source == target or _under(target, source):
        return None
    if _under(target, "openforgerl.cli") and not _under(source, "openforgerl.cli") and source != "openforgerl.__main__":
        return "nothing imports cli"
    if _under(source, *BOTTOM) and not _under(target, *BOTTOM):
        return "the bottom layer imports only the bottom layer"
    if _under(source, "openforgerl.containers") and not _under(target, *BOTTOM, "openforgerl.containers"):
        return "containers import only the bottom layer"
    if _under(source, "openforgerl.stack") and not _under(target, *BOTTOM, "openforgerl.containers", "openforgerl.stack"):
        return "the stack imports only the bottom layer and containers"
    if _under(source, "openforgerl.verifiers") and _under(target, "openforgerl.rollout", "openforgerl.envs"):
        return "verifiers import neither rollout nor envs"
    if _under(source, "openforgerl.rollout.proxy") and not _under(
            target, *BOTTOM, "openforgerl.models", "openforgerl.rollout.proxy", "openforgerl.rollout.trajectory"):
        return "the proxy imports only the bottom layer, models and rollout.trajectory"
    if source == "openforgerl.rollout.trajectory":
        return "rollout.trajectory is pure data"
    if _under(source, "openforgerl.rollout") and _under(target, "openforgerl.envs", "openforgerl.synth",
                                                         "openforgerl.train", "openforgerl.evaluation"):
        return "rollout imports none of envs, synth, train, evaluation"
    if _under(source, "openforgerl.evaluation") and _under(target, "openforgerl.envs", "openforgerl.synth",
                                                            "openforgerl.train"):
        return "evaluation reads runs and runs rollouts; it imports none of envs, synth, train"
    if _under(source, "openforgerl.envs") and _under(target, "openforgerl.rollout") and not (
            source == "openforgerl.envs.baselines" and target in ("openforgerl.rollout.run",
                                                                  "openforgerl.rollout.orchestrator")):
        return "envs imports rollout only to run validation rollouts (envs.baselines)"
    if _under(source, "openforgerl.synth") and _under(target, "openforgerl.train"):
        return "synth does not import train"
    return None


def test_every_import_in_the_package_follows_the_layers():
    broken = sorted(f"{source} -> {target}: {why}" for source, targets in graph().items() for target in targets
                    if (why := violation(source, target)))
    assert broken == []


@pytest.mark.parametrize("source, target", [
    # the imports the architecture review found, under the names they had then
    ("openforgerl.verifiers.compile", "openforgerl.rollout.verify"),
    ("openforgerl.rollout.run", "openforgerl.envs.build_publish"),
    ("openforgerl.rollout.run", "openforgerl.envs.docker_engine"),
    ("openforgerl.rollout.run", "openforgerl.envs.images"),
    ("openforgerl.rollout.runtimes.docker", "openforgerl.envs.docker_engine"),
    ("openforgerl.envs.images", "openforgerl.rollout.runtimes.docker"),
    ("openforgerl.envs.harbor", "openforgerl.rollout.runtimes.docker"),
    ("openforgerl.envs.build", "openforgerl.rollout.runtimes.docker"),
    # and the other rules
    ("openforgerl.rollout.orchestrator", "openforgerl.cli.rollout_view"),
    ("openforgerl.rollout.proxy.service", "openforgerl.train.export"),
    ("openforgerl.rollout.proxy.app", "openforgerl.rollout.orchestrator"),
    ("openforgerl.rollout.trajectory", "openforgerl.errors"),
    ("openforgerl.synth.propose", "openforgerl.train.export"),
    ("openforgerl.tasks", "openforgerl.rollout.harness"),
    ("openforgerl.containers.images", "openforgerl.stack.registry"),
    ("openforgerl.stack.registry", "openforgerl.rollout.harnesses.install"),
    ("openforgerl.envs.build", "openforgerl.rollout.run"),
    ("openforgerl.rollout.orchestrator", "openforgerl.evaluation.behaviour"),
    ("openforgerl.evaluation.runner", "openforgerl.envs.build"),
])
def test_the_rules_reject_the_edges_they_are_there_for(source: str, target: str):
    assert violation(source, target) is not None


def test_allowed_edges_pass():
    assert violation("openforgerl.envs.baselines", "openforgerl.rollout.run") is None
    assert violation("openforgerl.cli.rollout", "openforgerl.rollout.run") is None
    assert violation("openforgerl.train.export", "openforgerl.rollout.trajectory") is None
    assert violation("openforgerl.rollout.runtimes.docker", "openforgerl.containers.images") is None


def test_function_level_imports_are_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    source = tmp_path / "openforgerl" / "verifiers" / "sneaky.py"
    source.parent.mkdir(parents=True)
    source.write_text("def f():\n    from openforgerl.rollout import verify\n    import openforgerl.envs.build\n")
    (tmp_path / "openforgerl" / "rollout").mkdir()
    (tmp_path / "openforgerl" / "rollout" / "verify.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "openforgerl")
    assert imports_of(source) == {"openforgerl.rollout.verify", "openforgerl.envs.build"}


SANDBOX_PROGRAMS = {
    # program: third-party modules its image provides
    "verifiers/runner/forge_verify.py": set(), "verifiers/runner/forge_state.py": set(),
    "verifiers/runner/forge_suite.py": set(), "verifiers/runner/forge_judge.py": set(),
    "verifiers/runner/forge_dom.py": {"playwright"}, "verifiers/runner/forge_clawbench.py": set(),
    "templates/env/claw/forge_services.py": set(), "templates/env/gui/forge_webapp.py": set(),
    "rollout/harnesses/react_agent.py": {"openai"}, "rollout/harnesses/browser_agent.py": {"playwright"},
}
RUNNER_SIBLINGS = {"forge_verify", "forge_state", "forge_suite", "forge_judge", "forge_dom"}


@pytest.mark.parametrize("program", sorted(SANDBOX_PROGRAMS))
def test_programs_copied_into_sandboxes_import_only_what_the_sandbox_has(program: str):
    tree = ast.parse((PACKAGE / program).read_text())
    roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    foreign = roots - set(sys.stdlib_module_names) - SANDBOX_PROGRAMS[program] - RUNNER_SIBLINGS
    assert foreign == set()
