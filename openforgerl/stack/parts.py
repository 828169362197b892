"""The parts of the local stack, by name, in the order ``forge doctor`` shows them.

Each subsystem owns its part; the table names them by path so ``forge --help`` stays fast and a
missing optional extra only affects its own row.
"""

from __future__ import annotations

from openforgerl.plugins import NameTable
from openforgerl.stack.part import Part

PARTS: NameTable[type[Part]] = NameTable("stack part", {
    "docker": "openforgerl.stack.docker_engine:DockerEnginePart",
    "base-image": "openforgerl.stack.base_image:BaseImagePart",
    "registry": "openforgerl.stack.registry:RegistryPart",
    "model": "openforgerl.models.parts:ModelPart",
    "vllm": "openforgerl.serving.vllm:VllmPart",
    "harnesses": "openforgerl.rollout.harnesses.install:HarnessesPart",
    "gpu": "openforgerl.stack.gpu:GpuPart",
    "verl": "openforgerl.train.verl.launch:VerlPart",
    "kubernetes": "openforgerl.rollout.runtimes.kubernetes:KubernetesPart",
})

STACK_UP = ("docker", "base-image", "registry")
"""What ``forge stack up`` makes ready; the model and harnesses have their own commands."""


def load_part(key: str) -> Part:
    return PARTS.load(key)()


def default_parts(keys: tuple[str, ...] | None = None) -> list[Part]:
    return [load_part(key) for key in (keys or tuple(PARTS.names()))]
