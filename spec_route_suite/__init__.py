"""spec-route-suite: is your speculative-decoding route really lossless?

The product core lives in this package, one folder per import path: configuration (`config`, `options`),
route adapters and their engine flavours (`routes/`), the reference engine (`reference/`), managed real-engine
servers (`servers/`) and the session that builds routes. The design card's folders at the top of the
checkout (equivalence/, stressors/, reports/, fixtures/) install under this package as
`spec_route_suite.equivalence` and so on, mapped once in pyproject.toml, so PyPI's own `fixtures` or
`reports` can sit beside it; a checkout is used through `pip install -e .`, exactly as an installed wheel.
"""
__version__ = "0.1.0"
