"""The proxy's tokenizer loads without torch, and is the tokenizer AutoTokenizer would have given.

Every proxy shard loads the policy's tokenizer; through AutoTokenizer that imports torch (~350 MB
and seconds of start-up per shard, with one shard per core by default).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from openforgerl.models.registry import hf_tokenizer
from openforgerl.testing.proxy import policy_template

SAMPLE = [{"role": "system", "content": "Be brief. é 😀"}, {"role": "user", "content": "run `ls -la`\n\n"}]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """The policy tokenizer as ``save_pretrained`` (and ``forge model pull``) writes it."""
    directory = tmp_path_factory.mktemp("tokenizer")
    policy_template().tokenizer.save_pretrained(str(directory))
    return directory


def test_the_proxy_loads_a_saved_tokenizer_without_torch_and_tokenises_the_same(saved):
    template = policy_template()
    text = template.render(SAMPLE, None, True)
    script = (
        "import json, sys\n"
        "from openforgerl.rollout.proxy.template import load_chat_template\n"
        f"t = load_chat_template('policy', {str(saved)!r})\n"
        f"text = t.render({SAMPLE!r}, None, True)\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'text': text, 'ids': t.encode(text)}))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded["torch"] is False, "loading the proxy's tokenizer imported torch"
    assert loaded["text"] == text
    assert loaded["ids"] == template.encode(text)


@pytest.mark.parametrize("tokenizer_class", ["TokenizersBackend", "PreTrainedTokenizerFast", "GPT2Tokenizer"])
def test_hf_tokenizer_gives_the_class_autotokenizer_gives(saved, tmp_path, tokenizer_class):
    from transformers import AutoTokenizer

    directory = tmp_path / "tok"
    directory.mkdir()
    for path in saved.iterdir():
        (directory / path.name).write_bytes(path.read_bytes())
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": tokenizer_class}))
    mine, auto = hf_tokenizer(directory), AutoTokenizer.from_pretrained(str(directory))
    assert type(mine) is type(auto)
    text = policy_template().render(SAMPLE, None, True)
    assert mine.encode(text, add_special_tokens=False) == auto.encode(text, add_special_tokens=False)
    assert mine.eos_token_id == auto.eos_token_id
