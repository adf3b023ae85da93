"""Configuration errors, gathered so a routes file or a command line names every mistake in one go.

Why: a user who fixes one typo per run, then meets the next, learns to distrust the tool. Each reader of a
routes file validates field by field inside `Problems.field()`, which records a ConfigError and lets the
reader go on to the next field; `Problems.raise_any()` then raises one ConfigError (one mistake) or a
ConfigErrors listing them all, which the plugin prints as pytest's usage error (exit 4). An unknown key is
named with the closest known one (`did_you_mean`).
Environment: none.
"""
from __future__ import annotations

import difflib
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A bad configuration value; `field` is the dotted name of the offending field."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name

    @property
    def errors(self) -> tuple["ConfigError", ...]:
        return (self,)


class ConfigErrors(ConfigError):
    """Several configuration errors found together: the first names the field, the message lists them all."""

    def __init__(self, errors: Iterable[ConfigError]):
        self._errors = tuple(e for error in errors for e in error.errors)
        first = self._errors[0]
        lines = "\n".join(f"  {e}" for e in self._errors)
        ValueError.__init__(self, f"{len(self._errors)} problems:\n{lines}")
        self.field = first.field

    @property
    def errors(self) -> tuple[ConfigError, ...]:
        return self._errors


class Problems:
    """Collects the ConfigErrors of independent fields, so validation goes on past the first."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    @contextmanager
    def field(self) -> Iterator[None]:
        try:
            yield
        except ConfigError as exc:
            self.errors.extend(exc.errors)

    def value(self, read: Callable[[], T], fallback: T) -> T:
        """read()'s value, or `fallback` with its ConfigError recorded: a reader goes on past a bad value."""
        try:
            return read()
        except ConfigError as exc:
            self.errors.extend(exc.errors)
            return fallback

    def add(self, error: ConfigError) -> None:
        self.errors.extend(error.errors)

    def raise_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ConfigErrors(self.errors)


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """" (did you mean tokenizer?)" for a near miss of a known key, "" when nothing is close."""
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_keys(where: str, given: Iterable[str], known: Iterable[str], what: str = "unknown field") -> list[ConfigError]:
    """One ConfigError per key of `given` that is not `known`, each with its closest known key."""
    known = set(known)
    return [ConfigError(f"{where}.{key}" if where else key, f"{what}{did_you_mean(key, known)}")
            for key in sorted(set(given) - known)]
