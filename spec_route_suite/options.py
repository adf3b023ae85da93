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
# help groups, in the order `spec-route-suite --help` shows them
ROUTES, BUDGET, STRESS, REPORTS, RUNNING, SELF_TESTS_GROUP = (
    "routes and prompts", "statistical budget", "stressors", "reports and exit code", "the run", "self-tests only")
GROUPS = (ROUTES, BUDGET, STRESS, REPORTS, RUNNING, SELF_TESTS_GROUP)
REQUIRE_LEVELS = ("adopt", "pilot")
REQUIRE_EXIT = 6   # --require not met: not one of pytest's own exit codes (0-5), so a pipeline can tell it apart
EXIT_CODES = {0: "every check passed (read the verdict: ADOPT, PILOT or WAIT)", 1: "a check failed (a finding)",
              2: "interrupted", 3: "internal error", 4: "bad configuration, or a route failed its preflight",
              5: "no test selected", REQUIRE_EXIT: "the verdict fell short of --require"}


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
    group: str = RUNNING     # its heading in --help (GROUPS)

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
    # routes: what is judged, on which prompts
    Option("--routes", "TOML file (or a preset name) with [baseline] and [candidate] / [candidates.NAME] tables",
           group=ROUTES, metavar="FILE"),
    Option("--baseline", "baseline (AR) route URI, e.g. openai:http://host:port/v1?model=NAME&tokenizer=PATH",
           group=ROUTES, metavar="URI"),
    Option("--candidate", "candidate (speculative) route URI, e.g. hf:PATH?draft=PATH&num_assistant_tokens=4",
           group=ROUTES, metavar="URI"),
    Option("--prompts", "qualify on these prompts (repeatable): gsm8k|mt_bench|humaneval|mbpp[:PATH|HUB_ID] or "
                        "jsonl|parquet:PATH, ?limit=N&... (README)", action="append", metavar="SOURCE", group=ROUTES),
    Option("--categories", "comma-separated prompt categories (default {default}; with --prompts: theirs, all)",
           parse=names, default=PROMPT_CATEGORIES, group=ROUTES, metavar="LIST"),
    Option("--prompt-limit", "at most this many prompts per category", parse=integer, field="prompt_limit",
           group=ROUTES, metavar="N"),
    Option("--max-new-tokens", "tokens generated per greedy prompt (default {default})", parse=integer, default=64,
           field="max_new_tokens", group=ROUTES, metavar="N"),
    # budget: how small a fault the statistics must see
    Option("--alpha", "family-wise false-alarm rate of the statistical tests (default {default})", parse=fraction,
           default=0.01, field="alpha", group=BUDGET, metavar="P"),
    Option("--detect-tv", "smallest TV shift the sampling budget must detect (default {default})", parse=fraction,
           default=0.05, field="detect_tv", group=BUDGET, metavar="TV"),
    Option("--samples-per-prompt", "override the planner's samples per prompt", parse=integer,
           field="samples_per_prompt", group=BUDGET, metavar="N"),
    Option("--seed", "run seed for sampling arms and schedules (default {default})",
           parse=functools.partial(integer, minimum=0), default=0, field="seed", group=BUDGET, metavar="N"),
    Option("--greedy-policy", "strict (any divergence fails) or classify (near-ties are notes) (default {default})",
           parse=one_of(GREEDY_POLICIES), default="strict", field="greedy_policy", group=BUDGET,
           metavar="{" + ",".join(GREEDY_POLICIES) + "}"),
    Option("--near-tie-tau", "pin the near-tie margin tau in nats (default: from the A/A calibration)",
           parse=positive_number, field="near_tie_tau", group=BUDGET, metavar="NATS"),
    # stressors: the load
    Option("--concurrency", "concurrency levels for stressors (default {default})", parse=integers,
           default=(1, 8, 32), field="concurrency_levels", group=STRESS, metavar="LEVELS"),
    Option("--stress-requests", "requests per stressor (default: built-in budget)", parse=integer,
           field="stress_requests", group=STRESS, metavar="N"),
    # reports and the exit code
    Option("--report-dir", "where run folders go (default {default}, from the folder the suite runs in)",
           default="reports/out", group=REPORTS, metavar="DIR"),
    Option("--compare-to", "a previous run folder: list new, fixed and still-failing findings", group=REPORTS,
           metavar="RUN_DIR"),
    Option("--require", "exit " + str(REQUIRE_EXIT) + " unless every candidate's verdict is at least this "
                        "(adopt for a promotion job, pilot for a nightly one)", scope=RUN,
           parse=one_of(REQUIRE_LEVELS), group=REPORTS, metavar="{" + ",".join(REQUIRE_LEVELS) + "}"),
    # the run itself
    Option("--torch-threads", "torch threads per worker (default {default})", parse=integer, default=1,
           field="torch_threads", group=RUNNING, metavar="N"),
    Option("--progress", "progress of long checks: auto (status line on a terminal, plain lines otherwise), tty, "
                         "plain or off (default {default})", scope=RUN, default=ProgressSettings.mode, group=RUNNING,
           metavar="{auto,tty,plain,off}"),
    Option("--progress-every", "plain progress: at most one line per check every this many seconds "
                               "(default {default})", scope=RUN, default=ProgressSettings.every_s, group=RUNNING,
           metavar="SECONDS"),
    Option("--no-preflight", "skip the check that every route answers and uses the local tokenizer before the run "
                             "(the suite's self-tests of route errors use it)", scope=SELF_TESTS, default=False,
           action="store_true", group=SELF_TESTS_GROUP),
    Option("--vllm", "self-tests: also run the vLLM-for-CPU integration tests (installs and starts servers)",
           scope=SELF_TESTS, default=False, action="store_true", group=SELF_TESTS_GROUP),
    Option("--llama-cpp", "self-tests: also run the llama.cpp server integration tests (builds and starts servers)",
           scope=SELF_TESTS, default=False, action="store_true", group=SELF_TESTS_GROUP),
)
BY_DEST = {option.dest: option for option in OPTIONS}
SUITE_OPTIONS = tuple(option for option in OPTIONS if option.scope == SUITE)


def option(dest: str) -> Option:
    return BY_DEST[dest]


def register(parser: pytest.Parser) -> None:
    """Every declared option under its group's heading; pytest's own default is None ("not given") except for
    flags."""
    for heading in GROUPS:
        group = parser.getgroup(f"spec-route-suite: {heading}")
        for declared in (o for o in OPTIONS if o.group == heading):
            extra = {"action": declared.action} if declared.action else {}
            if declared.action == "store_true":
                extra["default"] = declared.default
            if declared.metavar:
                extra["metavar"] = declared.metavar
            group.addoption(declared.flag, dest=declared.dest, help=declared.help_text, **extra)


def suite_help(width: int = 100) -> str:
    """The suite's own options by group, with their metavars and defaults: what `spec-route-suite --help` shows
    before pytest's options."""
    import textwrap
    lines = ["spec-route-suite: is a speculative-decoding route lossless? (pytest with the suite's plugin)", "",
             "usage: spec-route-suite [-n N] [--routes FILE | --baseline URI --candidate URI] [options] [pytest options]",
             ""]
    for heading in GROUPS:
        lines.append(f"{heading}:")
        for declared in (o for o in OPTIONS if o.group == heading):
            flag = declared.flag + (f" {declared.metavar}" if declared.metavar and declared.action != "store_true"
                                    else "")
            wrapped = textwrap.wrap(declared.help_text, width - 28) or [""]
            lines.append(f"  {flag:<25} {wrapped[0]}" if len(flag) <= 25 else f"  {flag}\n{'':28}{wrapped[0]}")
            lines += [f"{'':28}{more}" for more in wrapped[1:]]
        lines.append("")
    lines += ["exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items()), ""]
    return "\n".join(lines)


def suite_options(config: pytest.Config) -> dict[str, Any]:
    """The command line's values of the options that feed SuiteConfig, by dest (what config.py parses)."""
    return {declared.dest: config.getoption(declared.dest) for declared in SUITE_OPTIONS}


def options_page() -> str:
    """docs/options.md: the help text in a code block, under a title."""
    return ("# Options\n\n`spec-route-suite --help` prints this first, then pytest's own options; every pytest "
            "option works too (`-n 8`, `-k`, `-x`).\n\n```text\n" + suite_help() + "```\n")


if __name__ == "__main__":
    print(options_page(), end="")
