"""The suite's command-line options, each declared once: flag, parser, default and help.

Why one table: the plugin registers the options from it (`register`), the configuration reads and parses
them through it (config.py `suite_config_from_options`), and README.md's options paragraph is checked
against it (tests/test_options.py), so a default or a help line cannot drift between three copies.

An option's value is the command line's text, parsed by its declaration's `parse` (which raises ConfigError
naming the option: exit 4), or its `default` when the option is not given. Options of scope "suite" feed
SuiteConfig (those with a `field` fill that field as parsed; the others, such as the routes and the report
folder, are resolved in config.py against the folder the suite runs in); "run" options shape how the run is
shown, "self-tests" options only the suite's own self-tests. Environment: none.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pytest

from spec_route_suite.progress import ProgressSettings
from spec_route_suite.routes.spec import ConfigError

Parser = Callable[[Any, str], Any]   # (the command line's value, the option's name) -> parsed value
GREEDY_POLICIES = ("strict", "classify")
PROMPT_CATEGORIES = ("math", "code", "chat", "json", "long")
SUITE, RUN, SELF_TESTS = "suite", "run", "self-tests"


def text(value: Any, name: str) -> str:
    return str(value)


def integer(value: Any, name: str, minimum: int = 1) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(name, f"expected an integer, got {value!r}") from None
    if number < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {number}")
    return number


def integers(value: Any, name: str) -> tuple[int, ...]:
    """Comma-separated integers >= 1 (`1,8,32`)."""
    return tuple(integer(v, name) for v in str(value).split(",") if v.strip())


def checked_number(value: Any, name: str, *, within: Callable[[float], bool], expected: str) -> float:
    """`value` as a number `within` its range; else a ConfigError naming the option and what it expects."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not within(number):
        raise ConfigError(name, f"expected {expected}, got {value!r}")
    return number


def fraction(value: Any, name: str) -> float:
    """A number strictly between 0 and 1."""
    return checked_number(value, name, within=lambda x: 0 < x < 1, expected="a number in (0, 1)")


def positive_number(value: Any, name: str) -> float:
    return checked_number(value, name, within=lambda x: x > 0, expected="a positive number")


def names(value: Any, name: str) -> tuple[str, ...]:
    """Comma-separated names, blanks dropped (which names are known is config.py's to check)."""
    return tuple(c.strip() for c in str(value).split(",") if c.strip())


def one_of(choices: tuple[str, ...]) -> Parser:
    def parse(value: Any, name: str) -> str:
        if value not in choices:
            raise ConfigError(name, f"expected one of {', '.join(choices)}, got {value!r}")
        return value
    return parse


def worded(default: Any) -> str:
    """A default as the command line writes it (`1,8,32`, `30`)."""
    if isinstance(default, tuple):
        return ",".join(map(worded, default))
    return f"{default:g}" if isinstance(default, float) else str(default)


@dataclass(frozen=True)
class Option:
    """One command-line option. `help` may say `{default}`: the declared default, worded once here."""

    flag: str
    help: str
    scope: str = SUITE
    parse: Parser = text
    default: Any = None
    field: str = ""          # the SuiteConfig field this option fills as parsed ("": resolved in config.py)
    action: str | None = None
    metavar: str | None = None

    @property
    def name(self) -> str:
        """How errors name it (`max-new-tokens`)."""
        return self.flag.removeprefix("--")

    @property
    def dest(self) -> str:
        """Its key in pytest's options and in the mapping config.py reads (`max_new_tokens`)."""
        return self.name.replace("-", "_")

    @property
    def help_text(self) -> str:
        return self.help.format(default=worded(self.default))

    def given(self, options: Mapping[str, Any]) -> Any:
        """The command line's value, None when not given (an empty value counts as not given)."""
        return options.get(self.dest) or None

    def value(self, options: Mapping[str, Any]) -> Any:
        """Parsed from the command line, or the declared default when not given."""
        raw = self.given(options)
        return self.default if raw is None else self.parse(raw, self.name)


OPTIONS: tuple[Option, ...] = (
    Option("--baseline", "baseline (AR) route URI, e.g. hf:PATH or openai:http://host:port/v1?model=NAME"),
    Option("--candidate", "candidate (speculative) route URI, e.g. hf:PATH?draft=PATH&num_assistant_tokens=4"),
    Option("--routes", "TOML file with [baseline] and [candidate] / [candidates.NAME] tables"),
    Option("--report-dir", "where run folders go (default {default}, from the folder the suite runs in)",
           default="reports/out"),
    Option("--greedy-policy", "strict (any divergence fails) or classify (default {default})",
           parse=one_of(GREEDY_POLICIES), default="strict", field="greedy_policy"),
    Option("--max-new-tokens", "tokens generated per greedy prompt (default {default})", parse=integer, default=64,
           field="max_new_tokens"),
    Option("--prompt-limit", "at most this many prompts per category", parse=integer, field="prompt_limit"),
    Option("--categories", "comma-separated prompt categories (default {default}; with --prompts: theirs, all)",
           parse=names, default=PROMPT_CATEGORIES),
    Option("--prompts", "qualify on these prompts (repeatable): gsm8k|mt_bench|humaneval|mbpp[:PATH|HUB_ID] or "
                        "jsonl|parquet:PATH, ?limit=N&... (README)", action="append", metavar="SOURCE"),
    Option("--compare-to", "a previous run folder: list new, fixed and still-failing findings"),
    Option("--near-tie-tau", "pin the near-tie margin tau in nats (default: from the A/A calibration)",
           parse=positive_number, field="near_tie_tau"),
    Option("--vllm", "self-tests: also run the vLLM-for-CPU integration tests (installs and starts servers)",
           scope=SELF_TESTS, default=False, action="store_true"),
    Option("--llama-cpp", "self-tests: also run the llama.cpp server integration tests (builds and starts servers)",
           scope=SELF_TESTS, default=False, action="store_true"),
    Option("--torch-threads", "torch threads per worker (default {default})", parse=integer, default=1,
           field="torch_threads"),
    Option("--concurrency", "concurrency levels for stressors (default {default})", parse=integers,
           default=(1, 8, 32), field="concurrency_levels"),
    Option("--alpha", "family-wise false-alarm rate of the statistical tests (default {default})", parse=fraction,
           default=0.01, field="alpha"),
    Option("--detect-tv", "smallest TV shift the sampling budget must detect (default {default})", parse=fraction,
           default=0.05, field="detect_tv"),
    Option("--samples-per-prompt", "override the planner's samples per prompt", parse=integer,
           field="samples_per_prompt"),
    Option("--seed", "run seed for sampling arms and schedules (default {default})",
           parse=functools.partial(integer, minimum=0), default=0, field="seed"),
    Option("--stress-requests", "requests per stressor (default: built-in budget)", parse=integer,
           field="stress_requests"),
    Option("--progress", "progress of long checks: auto (status line on a terminal, plain lines otherwise), tty, "
                         "plain or off (default {default})", scope=RUN, default=ProgressSettings.mode),
    Option("--progress-every", "plain progress: at most one line per check every this many seconds "
                               "(default {default})", scope=RUN, default=ProgressSettings.every_s),
)
BY_DEST = {option.dest: option for option in OPTIONS}
SUITE_OPTIONS = tuple(option for option in OPTIONS if option.scope == SUITE)


def option(dest: str) -> Option:
    return BY_DEST[dest]


def register(parser: pytest.Parser) -> None:
    """Every declared option in the plugin's group; pytest's own default is None ("not given") except for flags."""
    group = parser.getgroup("spec-suite", "speculative route qualification")
    for declared in OPTIONS:
        extra = {"action": declared.action} if declared.action else {}
        if declared.action == "store_true":
            extra["default"] = declared.default
        if declared.metavar:
            extra["metavar"] = declared.metavar
        group.addoption(declared.flag, dest=declared.dest, help=declared.help_text, **extra)


def suite_options(config: pytest.Config) -> dict[str, Any]:
    """The command line's values of the options that feed SuiteConfig, by dest (what config.py parses)."""
    return {declared.dest: config.getoption(declared.dest) for declared in SUITE_OPTIONS}
