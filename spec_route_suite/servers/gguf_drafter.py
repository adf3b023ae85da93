"""What llama.cpp must find in a converted drafter's GGUF to serve it as the kind it was exported as.

Why: llama.cpp tells DFlash 2 from DFlash by its tensors, not by a name: its loader (src/models/dflash.cpp) builds
the grouped convolutions and the candidate selector only when `selector_hidden.weight` is in the file, with the
`dflash.selector_*` / `dflash.conv_*` keys. A converter that dropped them would still write a valid file, and the
server would serve a plain DFlash under the name dflash2 (offline, the committed DFlash 2 without its selector
drafts 4.52 tokens a step instead of 5.29: tests/test_pair3_training.py). So the converted file is read back with
llama.cpp's own gguf-py (the converter's writer, from the same source tree) and held to what its speculators
config claims: the architecture, the layer count, the kind's keys with the export's values, the kind's tensors,
and for DFlash none of DFlash 2's (llama.cpp would serve those as DFlash 2). gguf_convert.py refuses a file that
falls short, so a server never starts on it.
Environment: none.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SELECTOR_TENSORS = ("selector_hidden.weight", "selector_predecessor.weight", "selector_successor.weight")
CONV_TENSORS = ("attn_conv_base", "attn_conv_proj.weight", "ffn_conv_base", "ffn_conv_proj.weight")   # blk.{i}.
DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
LAYER_TENSORS = ("attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                 "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
SKIPPED_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")   # large, not judged


@dataclass(frozen=True)
class GgufContents:
    metadata: dict[str, Any]
    tensors: dict[str, tuple[int, ...]]   # name -> shape


@dataclass(frozen=True)
class Expected:
    """What a drafter of one kind must (and must not) carry for llama.cpp."""

    kind: str
    metadata: dict[str, Any]
    tensors: frozenset[str]
    absent: frozenset[str] = frozenset()


def vendored_gguf(llama_cpp_dir: str | Path):
    """llama.cpp's gguf-py package from its source tree (the converter puts it on sys.path the same way)."""
    path = str(Path(llama_cpp_dir) / "gguf-py")
    if path not in sys.path:
        sys.path.insert(0, path)
    import gguf
    return gguf


def read_gguf(path: str | Path, gguf) -> GgufContents:
    """The file's metadata (values) and tensors (shapes), read with `gguf` (a gguf-py module)."""
    reader = gguf.GGUFReader(str(path))
    metadata = {name: field.contents() for name, field in reader.fields.items()
                if not name.startswith("GGUF.") and name not in SKIPPED_KEYS}
    return GgufContents(metadata, {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors})


def expected(spec: dict[str, Any]) -> Expected:
    """What llama.cpp needs for the drafter a speculators config describes."""
    kind = spec["speculators_model_type"]
    layers = spec["transformer_layer_config"]["num_hidden_layers"]
    common = {"fc.weight", *(f"blk.{i}.{t}" for i in range(layers) for t in LAYER_TENSORS)}
    if kind == "eagle3":
        return Expected(kind, {"general.architecture": "eagle3", "eagle3.block_count": layers},
                        frozenset({*common, "blk.0.attn_norm_2.weight"}))
    dflash2 = {*SELECTOR_TENSORS, *(f"blk.{i}.{t}" for i in range(layers) for t in CONV_TENSORS)}
    metadata = {"general.architecture": "dflash", "dflash.block_count": layers, "dflash.block_size": spec["block_size"]}
    common.add("enc.output_norm.weight")
    if kind == "dflash2":
        return Expected(kind, {**metadata, **{f"dflash.{k}": spec[k] for k in DFLASH2_KEYS}},
                        frozenset(common | dflash2))
    return Expected(kind, metadata, frozenset(common), absent=frozenset(dflash2))


def drafter_problems(spec: dict[str, Any], contents: GgufContents) -> list[str]:
    """Why llama.cpp would not serve this file as the drafter `spec` describes ([] when it would)."""
    want = expected(spec)
    problems = [f"{key} is {repr(contents.metadata[key]) if key in contents.metadata else 'absent'}, the export "
                f"says {value!r}" for key, value in want.metadata.items() if contents.metadata.get(key) != value]
    missing = sorted(want.tensors - set(contents.tensors))
    if missing:
        problems.append(f"missing tensors: {', '.join(missing)}")
    extra = sorted(want.absent & set(contents.tensors))
    if extra:
        problems.append(f"DFlash 2's tensors in a DFlash file (llama.cpp would serve it as DFlash 2): "
                        f"{', '.join(extra)}")
    if want.kind == "dflash2" and not set(SELECTOR_TENSORS) <= set(contents.tensors):
        problems.append("llama.cpp recognises DFlash 2 by its selector tensors: without them it would serve a plain "
                        "DFlash under the name dflash2")
    return problems
