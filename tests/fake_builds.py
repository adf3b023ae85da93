"""Fake llama.cpp builds: a `llama-server` that prints a given `--help`, so the flags the suite composes for a build
are checked without building one (CI builds only the pinned release, after the self-tests).
Environment: none.
"""
from __future__ import annotations

import stat
from pathlib import Path

import spec_route_suite.servers.llama_cpp as llama_cpp

OLD_LLAMA_HELP = """----- common params -----
-h,    --help, --usage                  print usage and exit
-m,    --model FNAME                    model path
-md,   --model-draft FNAME              draft model for speculative decoding (default: unused)
--draft-max, --draft, --draft-n N       number of tokens to draft for speculative decoding (default: 16)
--draft-min, --draft-n-min N            minimum number of draft tokens to use for speculative decoding
-c,    --ctx-size N                     size of the prompt context
-np,   --parallel N                     number of parallel sequences to decode
-t,    --threads N                      number of threads
-tb,   --threads-batch N                number of threads to use during batch and prompt processing
--alias STRING                          set alias for model name
--host HOST                             ip address to listen
--port PORT                             port to listen (default: 8080)
--metrics                               enable prometheus compatible metrics endpoint
"""
NEW_LLAMA_HELP = OLD_LLAMA_HELP.replace("--draft-max, --draft, --draft-n N", "--spec-draft-n-max N") \
    .replace("--draft-min, --draft-n-min N", "--spec-draft-n-min N") + \
    "--spec-type [none|draft-simple|draft-dflash|draft-eagle3]  speculative decoding type\n--slots   expose slots\n"


def fake_build(cache: Path, version: str, help_text: str) -> Path:
    """A llama.cpp build folder for `version` whose llama-server prints `help_text` (and a --version line)."""
    home = cache / "llama.cpp" / version
    binary = llama_cpp.server_binary(home)
    binary.parent.mkdir(parents=True)
    (home / "help.txt").write_text(help_text)
    binary.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "version: 9 (fake{version})"; exit 0; fi\n'
                      f'cat "{home / "help.txt"}"\n')
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    (home / f"llama_cpp_python-{version}.tar.gz").write_text("")   # the sdist the build folder was made from
    return home
