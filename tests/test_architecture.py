"""docs/architecture.md is true: every file it names exists, and its two recipes work as written (issue #44 item 4).

Why: a map that names moved files misleads the next maintainer, and a recipe nobody followed is a guess. A toy
engine flavour is written from the public face alone (spec_route_suite/api.py) and detected; a toy check is written
as the "add a check" recipe says, outside the suite, and run by `spec-route-suite` on the embedded pair: its coverage
row and finding reach the report.
Environment: none.
"""
from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

from spec_route_suite import api
from spec_route_suite.routes import flavours
from tests.test_check_bodies import problems_in

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "architecture.md").read_text()


def named_paths(text: str) -> set[str]:
    return {p.rstrip("/.,") for p in re.findall(r"(?<![\w/])((?:spec_route_suite|equivalence|stressors|reports|fixtures|"
                                               r"tests|docs)/[\w./-]*)", text)}


def test_every_file_the_page_names_exists():
    """(The recipes' own new files are named `my_...`: placeholders, not files of the suite.)"""
    missing = sorted(p for p in named_paths(PAGE) if "my_" not in p and not (ROOT / p).exists())
    assert named_paths(PAGE) and missing == []


def test_the_public_face_names_what_the_recipes_use():
    for name in ("Flavour", "flavour", "wire_kind", "Route", "Finding", "Request", "Probes", "ServerFacts"):
        assert name in api.__all__ and getattr(api, name) is not None


def test_a_toy_engine_follows_the_add_an_engine_recipe(tmp_path, monkeypatch):
    (tmp_path / "toy_recipe_engine.py").write_text(textwrap.dedent('''
        from spec_route_suite.api import Flavour, flavour

        @flavour
        class ToyRecipeEngine(Flavour):
            name = "toy-recipe"
            engine = "toy-recipe-engine"
            detect_order = 4
            probe_paths = ("/version",)

            def detect(self, probes):
                return probes.dict("/version").get("engine") == "toy-recipe-engine"
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("toy_recipe_engine")
    found = flavours.detect(api.Probes(bodies={"/version": {"engine": "toy-recipe-engine"}}, notes={}))
    assert found.name == "toy-recipe" and "toy-recipe" in flavours.registered()


def test_a_toy_check_follows_the_add_a_check_recipe(tmp_path):
    (tmp_path / "toy_recipe_judge.py").write_text(textwrap.dedent('''
        from spec_route_suite.api import Finding


        def first_token_finding(theirs, ours, *, route):
            """A bug when the candidate's first token is not the baseline's, else None."""
            if ours.token_ids[:1] == theirs.token_ids[:1]:
                return None
            return Finding(check="greedy", severity="bug", route=route, title="toy: first token")
    '''))
    (tmp_path / "test_toy_recipe_check.py").write_text(textwrap.dedent('''
        import pytest
        from spec_route_suite.api import Request
        from toy_recipe_judge import first_token_finding

        pytestmark = pytest.mark.check("greedy")


        def test_toy_first_token_matches(candidate, baseline, findings):
            req = Request(prompt_ids=(1, 330, 31, 226), max_tokens=4, request_id="toy-recipe")
            finding = first_token_finding(baseline.generate(req), candidate.generate(req), route=candidate.name)
            findings.cover("greedy", candidate.name, verified=True, ran={"prompts": 1}, part="toy")
            if finding is not None:
                findings.add(finding)
                pytest.fail(finding.title, pytrace=False)
    '''))
    assert problems_in(tmp_path / "test_toy_recipe_check.py", tmp_path) == []
    sys.path.insert(0, str(tmp_path))
    try:   # the judge's own unit test: both ways
        judge = importlib.import_module("toy_recipe_judge")
        same, other = SimpleNamespace(token_ids=(5, 6)), SimpleNamespace(token_ids=(7, 6))
        assert judge.first_token_finding(same, same, route="c") is None
        assert judge.first_token_finding(same, other, route="c").severity == "bug"
    finally:
        sys.path.remove(str(tmp_path))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "spec_route_suite", str(tmp_path / "test_toy_recipe_check.py"),
                           "-p", "no:cacheprovider", "--report-dir", str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    report = json.loads(next(out.glob("*/report.json")).read_text())
    rows = [r for r in report["coverage"] if r["check"] == "greedy" and r.get("part") == "toy"]
    assert rows and all(r["status"] == "verified" for r in rows), rows


def test_no_module_is_loaded_under_two_names():
    """Collect the whole route suite in one process: no module file may sit in sys.modules twice (a test module
    imported by another test module under its package name loads a second copy, with its own module state). The
    check folders' own package files are left out: pytest imports `equivalence/` and `stressors/` as top-level
    packages to reach their test modules (its rootdir import), beside the installed names; they hold no state."""
    script = textwrap.dedent('''
        import sys, collections, pytest
        pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "equivalence", "stressors"])
        files = collections.defaultdict(list)
        for name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None)
            if path and path.startswith(sys.argv[1]) and not path.endswith("__init__.py"):
                files[path].append(name)
        print("TWICE", sorted(names for names in files.values() if len(names) > 1))
    ''')
    done = subprocess.run([sys.executable, "-c", script, str(ROOT)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    twice = [line for line in done.stdout.splitlines() if line.startswith("TWICE")]
    assert twice == ["TWICE []"], done.stdout[-2000:]
