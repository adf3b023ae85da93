"""A tokenizer named by its hub id resolves to the hub cache's local copy, without a network call once cached.

Why: users name their server's tokenizer as they served it (`Qwen/Qwen3-8B`); the route must then read the very
files the hub cache holds, and every xdist worker must find them again offline.
Environment: points huggingface_hub's cache at a temporary folder, offline.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import huggingface_hub.constants
import pytest
from transformers import AutoTokenizer

from spec_route_suite.routes.config_errors import ConfigError
from spec_route_suite.routes.hub_tokenizer import local_tokenizer

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "fixtures" / "models" / "target"
REVISION = "0" * 40


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A hub cache holding `acme/tiny` (the embedded target's tokenizer files), as huggingface_hub lays it out."""
    repo = tmp_path / "hub" / "models--acme--tiny"
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json"):
        shutil.copy(TARGET / name, snapshot / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return snapshot


def test_a_cached_hub_id_resolves_to_its_snapshot_and_tokenizes_as_the_original(hub_cache):
    folder = local_tokenizer("acme/tiny", "candidate.tokenizer", ROOT)
    assert Path(folder) == hub_cache
    text = "def mean(values):\n    return sum(values) / len(values)\n"
    assert AutoTokenizer.from_pretrained(folder)(text)["input_ids"] == AutoTokenizer.from_pretrained(TARGET)(text)["input_ids"]


def test_a_hub_id_the_cache_does_not_hold_offline_says_to_pass_a_folder(hub_cache):
    with pytest.raises(ConfigError) as excinfo:
        local_tokenizer("acme/other", "candidate.tokenizer", ROOT)
    assert excinfo.value.field == "candidate.tokenizer" and "pass a local folder" in str(excinfo.value)
