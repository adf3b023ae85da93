"""A route's tokenizer as the user names it: a local folder, or a model-hub id resolved once to its local copy.

Why: users know their server's tokenizer by the hub id they served (`Qwen/Qwen3-8B`), not by a cache path. A
hub id is fetched with the hub's own loader (huggingface_hub, which transformers loads through), tokenizer
files only, and every later reader (xdist workers, repro scripts) gets the local folder it landed in, found in
the cache without a network call. Offline, or with the hub unreachable, it is one configuration error that
says to pass a local folder; the suite itself never downloads a model (its own tokenizers are committed).
Environment: the hub's own variables (HF_HUB_OFFLINE, HF_ENDPOINT, HF_HOME), read by huggingface_hub.
"""
from __future__ import annotations

import re
from pathlib import Path

from spec_route_suite.routes.config_errors import ConfigError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
# what a tokenizer needs from a hub repository (never the weights)
HUB_PATTERNS = ["tokenizer*", "special_tokens_map.json", "vocab*", "merges.txt", "*.tiktoken", "config.json",
                "generation_config.json", "chat_template*"]
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def local_tokenizer(value: object, field_name: str, base: Path) -> str:
    """The local folder holding the tokenizer `value` names: a path (relative to `base`), or a hub id."""
    if not isinstance(value, str) or not value:
        raise ConfigError(field_name, f"expected a tokenizer folder or hub id, got {value!r}")
    path = Path(value).expanduser()
    path = path if path.is_absolute() else base / path
    if path.exists():
        if not any((path / name).exists() for name in TOKENIZER_FILES):
            raise ConfigError(field_name, f"no tokenizer files ({', '.join(TOKENIZER_FILES)}) in {value}")
        return str(path.resolve())
    if not HUB_ID.match(value):
        raise ConfigError(field_name, f"path does not exist: {value}")
    return _from_hub(value, field_name)


def _from_hub(repo_id: str, field_name: str) -> str:
    """The cached copy of a hub repository's tokenizer files, fetched once when not cached yet."""
    from huggingface_hub import snapshot_download   # deferred: only a hub id pays for the import
    try:
        return snapshot_download(repo_id, allow_patterns=HUB_PATTERNS, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached (any of the hub's several errors): fetch it below
        pass
    try:
        folder = snapshot_download(repo_id, allow_patterns=HUB_PATTERNS)
    except Exception as exc:  # noqa: BLE001 - offline, unreachable, unknown or gated: the hub's words, one line
        raise ConfigError(field_name, f"{repo_id!r} is not a local folder, and the model hub did not give its "
                                      f"tokenizer ({_first_words(exc)}): pass a local folder that holds the "
                                      f"server's tokenizer.json") from None
    if not any((Path(folder) / name).exists() for name in TOKENIZER_FILES):
        raise ConfigError(field_name, f"the hub repository {repo_id!r} has no tokenizer files "
                                      f"({', '.join(TOKENIZER_FILES)})")
    return folder


def _first_words(exc: Exception, limit: int = 100) -> str:
    """The hub error's first sentence, short enough for the one line a configuration error gets."""
    text = " ".join(str(exc).split()).split(". ")[0]
    return f"{type(exc).__name__}: {text[:limit]}" if text else type(exc).__name__
