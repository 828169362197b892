"""Reference assets: what tasks are synthesized from — a web app, a home workspace, a repository.

An asset is a directory with an ``asset.toml``::

    name = "todo"
    domain = "gui"                       # gui | claw | code
    version = "1"
    description = "A to-do list web app (server-rendered, SQLite)."
    template = "gui"                     # the base environment (templates/env/<template>)
    families = ["gui.todo.add", ...]     # the task families that apply to it

    [template_params]                    # passed to the template (setup commands, services, ...)
    [environment]                        # asset dir -> the task's environment/ dir (the build context)
    webapp = "webapp"
    [state]
    copy = { webapp = "/srv/webapp" }    # asset dir -> sandbox path, for dry runs on this host
    seed = "python3 {asset}/webapp/seed.py --root {root}"   # then this, with {root} the host root
    stores = ["/var/lib/webapp"]         # where the environment keeps its state (never named in instructions)

Invariant: every task of one asset gets a byte-identical ``environment/`` (so build-env builds one
image per asset), and ``materialize(root)`` reproduces on this host, under ``root``, the state the
image starts with (the same seed, deterministic), which the host dry run checks tasks against.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import subprocess
import tomllib
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from openforgerl.errors import UserError
from openforgerl.tasks import Domain

ASSET_TOML = "asset.toml"
SEED_TIMEOUT_S = 120


class StateTable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    copy_: dict[str, str] = Field(default_factory=dict, alias="copy")
    """Asset dir or file -> absolute sandbox path it sits at in the image."""
    seed: str | None = None
    """Shell command that seeds the state under ``{root}`` (``{asset}``: this asset's directory)."""
    stores: list[str] = Field(default_factory=list)
    """Sandbox directories holding the environment's state (databases, mail, calendar)."""


class AssetConfig(BaseModel):
    """``asset.toml``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    domain: Domain
    version: str = "1"
    description: str = ""
    template: str
    families: list[str] = Field(min_length=1)
    template_params: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, str] = Field(default_factory=dict)
    state: StateTable = Field(default_factory=StateTable)


class Asset:
    """A loaded asset directory."""

    def __init__(self, root: Path, config: AssetConfig) -> None:
        self.root, self.config = root, config

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def domain(self) -> Domain:
        return self.config.domain

    @cached_property
    def sha256(self) -> str:
        """Over every file of the asset (relative path and bytes), in a fixed order."""
        digest = hashlib.sha256()
        for path in sorted(p for p in self.root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(path.relative_to(self.root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
        return digest.hexdigest()

    def write_environment(self, environment_dir: Path) -> None:
        """The build context every task of this asset shares (the template renders the Dockerfile)."""
        for source, dest in self.config.environment.items():
            src, target = self.root / source, environment_dir / dest
            if src.is_dir():
                shutil.copytree(src, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)

    def materialize(self, root: Path) -> Path:
        """The image's starting state under ``root`` on this host (copies, then the seed command)."""
        for source, dest in self.config.state.copy_.items():
            src, target = self.root / source, root / dest.lstrip("/")
            if src.is_dir():
                shutil.copytree(src, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)
        if self.config.state.seed:
            command = self.config.state.seed.format(root=shlex.quote(str(root)), asset=shlex.quote(str(self.root)))
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=SEED_TIMEOUT_S)
            if done.returncode != 0:
                raise UserError(f"{self.root / ASSET_TOML}: state.seed failed (exit {done.returncode}): "
                                f"{(done.stderr or done.stdout)[-300:]}", fix="make the seed command run on this host")
        return root


def load_asset(path: str | Path) -> Asset:
    """An asset directory (one holding asset.toml); one line naming the file and field when broken."""
    root = Path(path)
    toml_path = root / ASSET_TOML
    if not toml_path.is_file():
        raise UserError(f"{root}: no {ASSET_TOML}", fix=f"describe the asset in {toml_path} (see synth/assets.py)")
    try:
        data = tomllib.loads(toml_path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{toml_path}: not TOML: {exc}", fix="correct the syntax") from exc
    try:
        config = AssetConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise UserError(f"{toml_path}: {problems}", fix="correct the fields named") from exc
    for source in [*config.environment, *config.state.copy_]:
        if not (root / source).exists():
            raise UserError(f"{toml_path}: {source!r} does not exist in {root}", fix="name a file or dir of the asset")
    return Asset(root, config)


def bundled_assets(domain: Domain | None = None) -> list[Asset]:
    """The assets shipped in the package (openforgerl/synth/bundled/<domain>/<name>/)."""
    base = Path(str(resources.files("openforgerl.synth") / "bundled"))
    dirs = sorted(p.parent for p in base.glob(f"{domain or '*'}/*/{ASSET_TOML}"))
    return [load_asset(d) for d in dirs]


def find_assets(paths: list[str | Path]) -> list[Asset]:
    """User assets: each path an asset directory or a directory of them."""
    found: list[Asset] = []
    for raw in paths:
        path = Path(raw)
        if (path / ASSET_TOML).is_file():
            found.append(load_asset(path))
            continue
        children = sorted(p for p in path.iterdir() if (p / ASSET_TOML).is_file()) if path.is_dir() else []
        if not children:
            raise UserError(f"{path}: no {ASSET_TOML} in it or in any directory in it",
                            fix="pass an asset directory (see README 'Task synthesis')")
        found += [load_asset(child) for child in children]
    return found
