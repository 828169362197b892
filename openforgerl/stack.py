"""The embedded local stack as a list of parts that can be checked and made ready.

Invariant: ``Part.check`` never changes anything (``forge doctor`` is read-only);
``Part.ensure`` is idempotent and reports every change it makes as an ``Action`` with its undo.
"""

from __future__ import annotations

import shutil
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from openforgerl.errors import StackError


@dataclass(frozen=True)
class PartStatus:
    """What ``doctor`` shows for one part."""

    name: str
    ready: bool
    detail: str
    fix: str | None = None
    optional: bool = False


@dataclass(frozen=True)
class Action:
    """One change ``stack up`` made to the machine, and the command that reverts it."""

    did: str
    undo: str


Reporter = Callable[[Action], None]


class Part(ABC):
    """One piece of the local stack (engine, base image, registry, model, ...)."""

    name: str = "part"
    optional: bool = False

    @abstractmethod
    def check(self) -> PartStatus:
        """Report readiness without changing anything."""

    def ensure(self, report: Reporter) -> PartStatus:
        """Make the part ready (idempotent). Parts that cannot do it themselves say how."""
        status = self.check()
        if not status.ready:
            raise StackError(f"{self.name}: {status.detail}", fix=status.fix)
        return status

    def stop(self) -> list[str]:
        """Stop what ``ensure`` started (``forge stack down``); say what was stopped. Default: nothing."""
        return []

    def status(self, ready: bool, detail: str, fix: str | None = None) -> PartStatus:
        return PartStatus(self.name, ready, detail, None if ready else fix, self.optional)


class GpuPart(Part):
    """A CUDA GPU, optional: the embedded default runs on CPU."""

    name = "gpu"
    optional = True

    def check(self) -> PartStatus:
        smi = shutil.which("nvidia-smi")
        if not smi:
            return self.status(False, "no GPU (nvidia-smi not found); vLLM runs on CPU, veRL training needs a GPU",
                               fix="none needed for the embedded default; use a GPU machine for forge train")
        try:
            out = subprocess.run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return self.status(False, f"nvidia-smi failed: {exc}", fix="check the NVIDIA driver")
        if out.returncode != 0 or not out.stdout.strip():
            return self.status(False, f"nvidia-smi found no GPU: {out.stderr.strip()[:200]}",
                               fix="check the NVIDIA driver")
        return self.status(True, "; ".join(line.strip() for line in out.stdout.splitlines()))


# Parts in the order ``doctor`` shows them and ``stack up`` readies them. Each module owns its part;
# they are imported lazily so ``forge --help`` stays fast and a missing optional extra only affects its row.
PART_PATHS: dict[str, str] = {
    "docker": "openforgerl.envs.docker_engine:DockerEnginePart",
    "base-image": "openforgerl.envs.base_image:BaseImagePart",
    "registry": "openforgerl.envs.registry:RegistryPart",
    "model": "openforgerl.models.parts:ModelPart",
    "vllm": "openforgerl.serving.vllm:VllmPart",
    "harnesses": "openforgerl.rollout.harnesses.install:HarnessesPart",
    "gpu": "openforgerl.stack:GpuPart",
}

# What ``forge stack up`` makes ready; the model and harnesses have their own commands.
STACK_UP = ("docker", "base-image", "registry")


def load_part(key: str) -> Part:
    import importlib

    module_name, _, attr = PART_PATHS[key].partition(":")
    return getattr(importlib.import_module(module_name), attr)()


def default_parts(keys: tuple[str, ...] | None = None) -> list[Part]:
    return [load_part(key) for key in (keys or tuple(PART_PATHS))]
