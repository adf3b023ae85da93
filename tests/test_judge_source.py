"""A repro script carries only its judge (reports/judge_source.py): each cut runs on the runtime alone, and a
KV-pressure window keeps every request it replays within the script's size budget.

Why: a CI run saw `preempt_loses_draft_state`'s repro unchanged in 20 passes. Its window of 15 requests had been
cut to the last 8 so that the script, which carried every judge, fit MAX_SCRIPT_CHARS, and 8 requests no longer
overflowed the KV pool.
"""
from __future__ import annotations

import ast
import builtins
import json
import types

import pytest

from spec_route_suite.routes.base import Request
from spec_route_suite.reports.judge_source import judge_functions, judge_source
from spec_route_suite.reports.repro import MAX_SCRIPT_CHARS, RUNTIME, render_cluster
from spec_route_suite.reports.repro_spec import load_repro


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def unresolved(judge_code: str) -> set[str]:
    """Global names the script's judge functions read that neither the runtime, the cut nor builtins define."""
    namespace: dict = {"__name__": "repro_script"}
    exec(compile(RUNTIME.read_text() + "\n\n" + judge_code, "repro_script", "exec"), namespace)
    cut = compile(judge_code, "cut", "exec")
    functions = [c for c in _code_objects(cut) if c is not cut]
    # co_names holds attribute names too: a global read is one that also occurs as a bare name in the cut
    bare = {n.id for n in ast.walk(ast.parse(judge_code)) if isinstance(n, ast.Name)}
    read = {name for code in functions for name in code.co_names} & bare
    return {n for n in read if n not in namespace and not hasattr(builtins, n)}


@pytest.mark.parametrize("judge", sorted(judge_functions()))
def test_each_judges_cut_runs_on_the_runtime_alone(judge):
    code = judge_source(judge)
    assert unresolved(code) == set(), code
    namespace: dict = {"__name__": "repro_script"}
    exec(compile(RUNTIME.read_text() + "\n\n" + code, "repro_script", "exec"), namespace)
    assert list(namespace["JUDGES"]) == [judge] and callable(namespace["JUDGES"][judge])


def test_the_unresolved_names_check_sees_a_helper_left_out():
    """The check above can fail: the load judge's cut without its `_replay` helper reads a name nothing defines."""
    code = judge_source("load")
    start = code.index("async def _replay")
    without = code[:start] + code[code.index("async def _load_changes"):]
    assert unresolved(without) == {"_replay"}


class _Handle:
    def __init__(self, name: str):
        self.name = name

    def repro_wire(self, req: Request) -> dict:
        return {"path": "/completions", "body": {"prompt": list(req.prompt_ids), "max_tokens": req.max_tokens,
                                                 "temperature": 0.0, "ignore_eos": True, "return_token_ids": True}}


def test_a_kv_pressure_window_of_sixteen_requests_keeps_them_all():
    steps = [(Request(prompt_ids=tuple(range(100 + i, 130 + i)), max_tokens=96, temperature=0.0, ignore_eos=True,
                      request_id=f"kv-{i}"), 12.0 * i, None) for i in range(16)]
    block = load_repro(steps, candidate=_Handle("cand"), baseline=_Handle("base"), concurrency=8, attempts=20,
                       note="replayed under the same KV pressure")
    report = {"findings": [{"details": {"repro": block}}], "config": {}}
    cluster = {"id": 1, "title": "16 of 64 outputs under KV pressure differ", "check": "kv-pressure",
               "severity": "bug", "route": "cand", "findings": [0], "count": 1, "tests_total": 1}
    script, _, data = render_cluster(report, cluster, "repro/001-reference-kv-pressure")
    assert len(data["cases"][0]["steps"]) == 16 and len(script) <= MAX_SCRIPT_CHARS
    embedded = json.loads(script.split("DATA = json.loads(r'''", 1)[1].split("''')", 1)[0])
    assert [s["request"]["candidate"]["body"]["prompt"][0] for s in embedded["cases"][0]["steps"]] == \
        [100 + i for i in range(16)]
    assert "def judge_load" in script and "def judge_distribution" not in script
