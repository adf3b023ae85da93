"""The embedded tiny pairs as the run sees them: where their weights are, the chat format and corpora they speak.

The weights are data under fixtures/models/; the code that trains them is spec_route_suite/training/.

The first pair (Llama, byte-level BPE) lives in ``fixtures/models/target`` and
``fixtures/models/draft``; the second (Mistral, sentencepiece BPE, its own
special-token ids) in ``fixtures/models/pair2/{target,draft}``. Rebuild with
``python -m spec_route_suite.training.train [--pair pair2]`` so the suite
can qualify a speculative route with no model hub access.
"""
from pathlib import Path

import spec_route_suite.fixtures as _fixtures   # the data folder, wherever the package is installed

MODELS_DIR = Path(_fixtures.__file__).resolve().parent / "models"
TARGET_DIR = MODELS_DIR / "target"
DRAFT_DIR = MODELS_DIR / "draft"
PAIR2_DIR = MODELS_DIR / "pair2"
