"""The launcher's fix for seeded requests on vLLM's CPU build (openforgerl.serving.cpu_seed), on a runner
shaped like vLLM 0.32's: a step samples every row with its own generator, then rewinds the generators of rows
whose sample it throws away, which a CPU generator refuses. The launcher applies it inside the real server
(tests/integration/test_model.py: a seeded prompt prefilled in chunks is served, and reproduced)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from openforgerl.serving import cpu_seed


class Runner:
    """vLLM's sample_tokens in small: draw for each seeded row, then the CUDA-only rewind of discarded rows."""

    def __init__(self, generators: dict[int, torch.Generator], discard: list[bool]):
        self.input_batch = SimpleNamespace(generators=generators, num_reqs=len(discard))
        self.discard_request_mask = SimpleNamespace(np=np.array(discard))
        self.execute_model_state = object()
        self.drawn: dict[int, float] = {}

    def sample_tokens(self, grammar_output: object) -> dict[int, float]:
        generators = self.input_batch.generators
        self.drawn = {row: torch.rand(1, generator=generator).item() for row, generator in generators.items()}
        for row in np.nonzero(self.discard_request_mask.np[:self.input_batch.num_reqs])[0]:
            generator = generators.get(int(row))
            if generator is not None:
                generator.set_offset(generator.get_offset() - 4)
        return self.drawn


def seeded(seed: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(seed)


def test_unpatched_the_rewind_of_a_cpu_generator_raises():
    runner = Runner({0: seeded(1)}, [True])
    with pytest.raises(RuntimeError, match="does not use offset"):
        runner.sample_tokens(None)


def test_a_discarded_row_leaves_its_generator_untouched_and_a_kept_row_draws_from_its_own():
    class Patched(Runner):
        pass

    cpu_seed.patch_runner(Patched)
    cpu_seed.patch_runner(Patched)  # once only
    discarded, kept = seeded(1), seeded(2)
    generators = {0: discarded, 3: kept}
    runner = Patched(generators, [True, False, False, False])
    drawn = runner.sample_tokens(None)
    assert runner.input_batch.generators is generators and generators == {0: discarded, 3: kept}
    assert drawn == {3: torch.rand(1, generator=seeded(2)).item()}  # row 0 drew without its generator
    # Row 0's next draw is its generator's first: as if the discarded step had not sampled at all.
    assert torch.rand(1, generator=discarded).item() == torch.rand(1, generator=seeded(1)).item()


def test_a_runner_without_what_the_patch_reads_is_left_to_vllm():
    class Bare:
        execute_model_state = object()

        def sample_tokens(self, grammar_output: object) -> str:
            return "sampled"

    cpu_seed.patch_runner(Bare)
    assert Bare().sample_tokens(None) == "sampled"

