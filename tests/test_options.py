"""Each command-line option is declared once (spec_route_suite/options.py), and every reader uses that declaration.

Why: the options were typed three times (the plugin's addoption calls, a tuple of names, the configuration's
keys and defaults), so a default or a help line could drift between copies. Checked here: pytest's --help
shows each declaration's help; the configuration reads exactly the declared suite options and gets its
defaults from them; a bad value names the option (exit 4 on the command line); README.md's options
paragraph names every declared option, no undeclared one, and states their defaults as declared.
Environment: none.
"""
from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from spec_route_suite import options
from spec_route_suite.config import SuiteConfig, suite_config_from_options
from spec_route_suite.options import OPTIONS, SUITE_OPTIONS, text, worded
from spec_route_suite.routes.spec import ConfigError

ROOT = Path(__file__).resolve().parent.parent
VALIDATED = [o for o in SUITE_OPTIONS if o.parse not in (text, options.names)]


class ReadKeys(dict):
    """A mapping of options that remembers which keys were read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)


def squeezed(text_: str) -> str:
    """Without whitespace: pytest's --help wraps lines, also at hyphens."""
    return "".join(text_.split())


def test_each_option_is_declared_once():
    flags = [o.flag for o in OPTIONS]
    assert len(flags) == len(set(flags)) and all(f.startswith("--") for f in flags)
    targets = [o.field for o in OPTIONS if o.field]
    assert len(targets) == len(set(targets)), "two options fill one SuiteConfig field"
    assert set(targets) <= {f.name for f in fields(SuiteConfig)}
    assert all(o.scope == options.SUITE for o in OPTIONS if o.field)


def test_pytest_help_shows_every_declaration():
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "spec_route_suite.plugin", "-p", "no:cacheprovider",
                           "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    shown = squeezed(done.stdout)
    for declared in OPTIONS:
        assert declared.flag in shown, declared.flag
        assert squeezed(declared.help_text) in shown, declared.flag


def test_the_configuration_reads_exactly_the_declared_suite_options():
    given = ReadKeys()
    suite_config_from_options(given, invocation_dir=ROOT, environ={})
    assert given.read == {o.dest for o in SUITE_OPTIONS}


def test_defaults_come_from_the_declarations():
    config = suite_config_from_options({}, invocation_dir=ROOT, environ={})
    for declared in SUITE_OPTIONS:
        if declared.field:
            assert getattr(config, declared.field) == declared.default, declared.flag
    assert config.categories == options.option("categories").default
    assert config.report_dir == ROOT / options.option("report_dir").default


@pytest.mark.parametrize("declared", VALIDATED, ids=[o.flag for o in VALIDATED])
def test_a_bad_value_names_its_option(declared):
    with pytest.raises(ConfigError) as excinfo:
        suite_config_from_options({declared.dest: "nope"}, invocation_dir=ROOT, environ={})
    assert excinfo.value.field == declared.name


def test_a_bad_value_on_the_command_line_exits_4_naming_the_option():
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--detect-tv", "2",
                           "--collect-only", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "bad configuration: detect-tv: expected a number in (0, 1), got '2'" in done.stderr


def test_the_options_page_is_the_help_text():
    """docs/options.md, which the README links, is exactly what `spec-route-suite --help` prints first
    (`python -m spec_route_suite.options > docs/options.md` writes it)."""
    assert (ROOT / "docs" / "options.md").read_text() == options.options_page()


def test_the_options_page_check_can_fail(monkeypatch):
    monkeypatch.setattr(options, "OPTIONS", options.OPTIONS[1:])
    with pytest.raises(AssertionError):
        test_the_options_page_is_the_help_text()


def test_the_readme_names_every_option_group_and_links_the_page():
    readme = (ROOT / "README.md").read_text()
    assert "docs/options.md" in readme and "spec-route-suite --help" in readme
