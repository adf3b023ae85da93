"""A route's local tokenizer: loaded from a local folder only, identified by a hash of its files, and the one
way a fully formatted prompt text becomes token ids.

Every layer may import this module (it imports nothing of the suite): checks size prompts with it, adapters
decode with it, reports hash it. Loading never reaches a model hub: a path is a local folder.
Environment: none.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def load_tokenizer(path: str):
    from transformers import AutoTokenizer   # deferred: parsing a routes file never loads transformers
    return AutoTokenizer.from_pretrained(path)


def tokenizer_hash(path: str) -> str:
    """Hash of the tokenizer files, so two routes can be checked for the same tokenizer."""
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        file = Path(path) / name
        if file.exists():
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def encode_prompt(tokenizer, text: str) -> tuple[int, ...]:
    """A fully formatted prompt text (chat template applied, BOS included as text) -> ids."""
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])
