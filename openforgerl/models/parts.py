"""The converted policy model as a part of the local stack (a row of ``forge doctor``).

Invariant: ``check`` only reads the model directory and package metadata (no hashing, no imports of
torch/transformers), so doctor stays fast; ``ensure`` is ``forge model pull`` and reports its undo.
"""

from __future__ import annotations

import importlib.metadata

from openforgerl.models.convert import pull, read_marker
from openforgerl.models.registry import DEFAULT_MODEL, get_model, model_dir
from openforgerl.stack.part import Action, Part, PartStatus, Reporter


class ModelPart(Part):
    """The default policy model, converted to a Hugging Face directory in the user cache."""

    name = "model"

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        self.model = get_model(model).name

    def check(self) -> PartStatus:
        directory = model_dir(self.model)
        marker = read_marker(directory)
        if marker is None:
            what = "incomplete" if directory.exists() else "not pulled"
            return self.status(False, f"{self.model}: {what} ({directory})", fix=f"forge model pull {self.model}")
        detail = f"{self.model} at {directory} (from {marker.get('source_package')} {marker.get('source_version')})"
        installed = _installed_version(marker.get("source_package", ""))
        if installed and installed != marker.get("source_version"):
            detail += f"; {installed} is installed now, `forge model pull {self.model}` updates it"
        return self.status(True, detail)

    def ensure(self, report: Reporter) -> PartStatus:
        result = pull(self.model)
        if result.converted:
            report(Action(did=f"converted {self.model} into {result.directory}", undo=f"rm -rf {result.directory}"))
        return self.check()


def _installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
