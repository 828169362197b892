"""Seeded requests on vLLM's CPU build: a discarded sample must not kill the engine.

The bug (vLLM 0.32, CPU): a request that carries a ``seed`` gets its own ``torch.Generator``. When a step
samples a token that is then thrown away (a prompt prefilled in chunks: the CPU server's chunk is 2,048
tokens, and concurrent requests share that budget, so a shorter prompt can be split too), the model runner
rewinds that generator with ``set_offset(get_offset() - 4)``. That is a detail of CUDA's Philox generators;
a CPU generator raises "CPU Generator does not use offset", the engine core dies, and every request in
flight, and after, gets HTTP 500. One harness that sets ``seed`` (an OpenAI client option) would end every
rollout of a training step as an infrastructure error.

The fix, installed by the launcher in every vLLM process: a sample that will be discarded is drawn without
the request's generator (from the global one), so that generator is left exactly as if the token had not
been sampled, which is what the rewind means, and there is nothing to rewind. A seeded request therefore
gives the same tokens whether its prompt was prefilled in one step or in several (served from the prefix
cache, or split by another request's share of the chunk).

Only CPU generators are handled; CUDA generators keep vLLM's own rewind. The patch is applied when vLLM's
model runner module is imported (an import hook), so the launcher does not import vLLM itself.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
RUNNER_CLASS = "GPUModelRunner"  # vLLM's CPUModelRunner subclasses it and keeps its sample_tokens
PATCHED = "_forge_cpu_seed_patched"
SAMPLE = "sample_tokens"


def discarded_cpu_generators(runner: Any) -> dict[int, Any]:
    """The batch rows whose sample this step throws away and that hold a CPU generator (none when this
    vLLM's runner lacks what the patch reads: it then leaves the step to vLLM as it is)."""
    try:
        batch = runner.input_batch
        generators = batch.generators
        if not generators:
            return {}
        mask = runner.discard_request_mask.np[:batch.num_reqs]
    except AttributeError:
        return {}
    return {row: generator for row, generator in generators.items()
            if row < len(mask) and mask[row] and generator.device.type == "cpu"}


def patch_runner(cls: type) -> None:
    """Wrap ``cls.sample_tokens``: rows to be discarded sample without their CPU generator."""
    if getattr(cls, PATCHED, False):
        return
    original: Callable[..., Any] = getattr(cls, SAMPLE)

    @functools.wraps(original)
    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.execute_model_state is None:
            return original(self, *args, **kwargs)
        held = discarded_cpu_generators(self)
        if not held:
            return original(self, *args, **kwargs)
        generators = self.input_batch.generators
        for row in held:
            del generators[row]  # the sampling metadata holds this same dict
        try:
            return original(self, *args, **kwargs)
        finally:
            generators.update(held)

    setattr(cls, SAMPLE, sample_tokens)
    setattr(cls, PATCHED, True)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of the model runner module to patch it once loaded."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != RUNNER_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            cls = getattr(module, RUNNER_CLASS, None)
            if isinstance(cls, type) and hasattr(cls, SAMPLE):
                patch_runner(cls)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Patch vLLM's model runner when it is imported (at once if it already was). Idempotent."""
    loaded = sys.modules.get(RUNNER_MODULE)
    if loaded is not None:
        cls = getattr(loaded, RUNNER_CLASS, None)
        if isinstance(cls, type):
            patch_runner(cls)
        return
    if not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
