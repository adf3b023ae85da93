"""The objects a run's checks are handed, built in one place: routes, their inventories, tokenizer, context fit.

Why one builder: the pytest fixtures (fixtures/route_fixtures.py, per worker) and the controller's class
phases after the tests (class_phases.py) need the same graph: a RouteSession over the configured routes,
each route's inventory at first use, the baseline's tokenizer, the context a set of routes shares and the
run's prompts sized into it. Each part is built when first asked for and kept. Environment: none.
"""
from __future__ import annotations

from functools import cached_property
from typing import Any, Sequence

from spec_route_suite.config import SuiteConfig
from spec_route_suite.routes.base import RouteInventory
from spec_route_suite.routes.errors import RouteError
from spec_route_suite.routes.spec import RouteSpec
from spec_route_suite.session import RouteHandle, RouteSession


class SessionGraph:
    """One process's routes and what is derived from them, built lazily from the run's SuiteConfig.

    `inventories` (route name -> inventory fields) and `notes` may be the run collector's own, so what the
    graph learns at a route's first use reaches the report."""

    def __init__(self, suite: SuiteConfig, *, specs: Sequence[RouteSpec] | None = None,
                 inventories: dict[str, dict[str, Any]] | None = None, notes: list[str] | None = None):
        self.suite = suite
        self.specs = tuple(specs) if specs is not None else (suite.routes.baseline, *suite.routes.candidates)
        self.inventories = {} if inventories is None else inventories
        self.notes = [] if notes is None else notes

    @cached_property
    def session(self) -> RouteSession:
        return RouteSession(self.specs, self.suite.request_timeout_s)

    def route(self, name: str) -> RouteHandle:
        """The route's handle; its inventory is recorded at first use, while it is surely alive (an engine may
        die mid-run), and a route that cannot state it gets a note instead."""
        handle = self.session.handle(name)
        if name not in self.inventories:
            try:
                self.inventory(name)
            except (RouteError, OSError) as exc:
                self.notes.append(f"{name}: inventory unavailable at first use: {exc}")
        return handle

    def baseline(self) -> RouteHandle:
        return self.route(self.suite.routes.baseline.name)

    def inventory(self, name: str) -> RouteInventory:
        """The route's inventory asked now (raises RouteError or OSError when it cannot answer), and recorded."""
        inventory = self.session.handle(name).inventory()
        self.inventories[name] = inventory.__dict__
        return inventory

    @cached_property
    def tokenizer(self):
        """The baseline's tokenizer: every check sends the token ids it makes, to every route."""
        from spec_route_suite.tokenizers import load_tokenizer
        spec = self.suite.routes.baseline
        return load_tokenizer(spec.tokenizer or spec.model)

    def context_fit(self, *handles: RouteHandle):
        """The smallest context of `handles`, read at every use from their recorded inventories and what each
        route has learned since (a limit a server stated in a refusal)."""
        from spec_route_suite.prompts.fit import ContextFit, route_context

        def contexts():
            return tuple(route_context(h.spec, h.context_limit((self.inventories.get(h.name) or {})
                                                               .get("max_model_len")))
                         for h in handles)
        return ContextFit(contexts)

    def fitted_prompts(self, fit):
        """Prompt records -> the token ids to send, sized into `fit` at the run's --max-new-tokens."""
        from spec_route_suite.prompts.fit import FittedPrompts
        return FittedPrompts(self.tokenizer, fit, max_tokens=self.suite.max_new_tokens)

    def run_prompts(self):
        from spec_route_suite.prompts.prompt_set import run_prompts
        return run_prompts(self.suite)

    def built(self) -> dict[str, RouteHandle]:
        """The routes this process has used (a route never asked for is never built)."""
        return self.session.built() if "session" in self.__dict__ else {}

    def close(self) -> None:
        if "session" in self.__dict__:
            self.session.close()
