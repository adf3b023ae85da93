"""spec-route-suite: is your speculative-decoding route really lossless?

Everything the suite installs lives under this one import package (`spec_route_suite.fixtures`,
`.equivalence`, `.stressors`, `.reports`), so it can sit beside other projects' top-level
`fixtures` or `reports` packages. In the repository the four folders stay at the top level
(setuptools' package-dir maps them here); a checkout that is imported without being installed
finds them through the line below.
"""
from pathlib import Path as _Path

_HERE = _Path(__file__).resolve().parent
if not (_HERE / "equivalence").is_dir() and (_HERE.parent / "equivalence" / "greedy.py").is_file():
    __path__.append(str(_HERE.parent))  # noqa: F821 - a package's own __path__: the checkout's folders

__version__ = "0.1.0"
