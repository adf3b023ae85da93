"""Acceptance by prompt class, proven through a user's prompt file: the correct engine's classes all accept and
no gap is named; with `collapse_long_prompts` planted, the same phases (one budget) show the long class at
acceptance length 1.00 and the report names it, while every answer stays the correct engine's. The
per-answer evidence agrees with the engine's cumulative counters; a server that has only /metrics counters
(the in-process vLLM-flavoured server) is deferred by the worker and measured by the controller's class-pure
phases, and a phase whose counters grew more than its own answers explain is not trusted."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from spec_route_suite.class_phases import run_deferred_phases
from spec_route_suite.equivalence.class_acceptance import (NONE, PER_ANSWER, SERVER_COUNTERS, class_profile,
                                                           class_requests, contamination)
from spec_route_suite.config import suite_config_from_options
from spec_route_suite.embedded import TARGET_DIR
from spec_route_suite.prompts.fit import ContextFit, FittedPrompts, RouteContext
from spec_route_suite.prompts.loaders import load
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import AcceptanceSnapshot
from spec_route_suite.tokenizers import load_tokenizer
from spec_route_suite.routes.loop import BackgroundLoop
from spec_route_suite.routes.spec import parse_route_uri
from spec_route_suite.session import RouteHandle
from spec_route_suite.servers.inprocess import serve_in_thread
from spec_route_suite.reports.by_class import class_gaps, class_problems, class_report

ROOT = Path(__file__).resolve().parent.parent
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def traffic(tmp_path_factory) -> Path:
    """A user's traffic file: short math questions and long support chats (400+ tokens), as JSON lines."""
    path = tmp_path_factory.mktemp("traffic") / "traffic.jsonl"
    rows = [{"id": r.id, "text": r.text.removeprefix("<s>"), "category": "short", "answer": r.answer}
            for r in load_prompt_set(["math"])[:3]]
    rows += [{"id": r.id, "messages": [{"role": a, "content": b} for a, b in r.messages], "category": "long"}
             for r in load_prompt_set(["long"])[:3]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def bench(traffic):
    from spec_route_suite.reference.route import ReferenceRoute, load_model
    torch.set_num_threads(1)
    loop = BackgroundLoop()
    spec = parse_route_uri("candidate", "reference:", base=ROOT)
    models = (load_model(spec.model), load_model(spec.draft))
    tokenizer = load_tokenizer(spec.tokenizer)
    fitted = FittedPrompts(tokenizer, ContextFit((RouteContext("candidate", 512, "test"),)), max_tokens=MAX_TOKENS)

    def handle(query: str = "") -> RouteHandle:
        s = parse_route_uri("candidate", "reference:" + (f"?{query}" if query else ""), base=ROOT)
        return RouteHandle(ReferenceRoute(s, models=models), s, loop, timeout_s=120.0)
    yield SimpleNamespace(handle=handle, groups=class_requests(load("jsonl", traffic), fitted), fitted=fitted)
    loop.close()


def _report(name: str, profile) -> dict:
    return class_report({"class_acceptance": [{"route": name, "classes": [c.as_dict() for c in profile]}]})


def test_a_class_where_every_draft_is_rejected_is_named_and_the_correct_engine_passes(bench):
    answers = {}
    for name, query in (("correct", ""), ("collapsed", "fault=collapse_long_prompts")):
        route = bench.handle(query)
        before = route.acceptance()
        profile, deferred = class_profile(route, bench.groups, depth=4, defer_server=True)
        total = route.acceptance().minus(before)
        assert not deferred and [(c.source, c.category, c.method) for c in profile] == [
            ("traffic", "short", PER_ANSWER), ("traffic", "long", PER_ANSWER)]
        assert sum(c.accepted for c in profile) == total.accepted, "per-answer counts add up to the engine's"
        assert sum(c.drafts for c in profile) == total.drafts
        by = {c.category: c for c in profile}
        assert by["short"].mean_acceptance_length > 2.0 and by["short"].accepted_per_pos[0] > 0
        answers[name] = [route.generate(r).token_ids for r in bench.groups[("traffic", "long")]]
        named = class_gaps(_report(name, profile)) + class_problems(_report(name, profile))
        if name == "correct":
            assert by["long"].mean_acceptance_length > 1.5 and named == []
        else:
            assert by["long"].accepted == 0 and by["long"].draft_tokens >= 16
            assert by["long"].mean_acceptance_length == 1.0
            assert named == [f"speculation ran but accepted nothing on prompt class `traffic/long` of `collapsed` "
                             f"({by['long'].draft_tokens} drafted tokens, none accepted, while other classes "
                             f"accept): its accept path never ran there, so its checks on that class exercised "
                             f"the target alone"]
        route.close()
    assert answers["collapsed"] == answers["correct"], "the planted collapse is lossless: only acceptance moves"


def test_server_counters_are_trusted_only_when_the_phase_explains_them():
    quiet = AcceptanceSnapshot(drafts=10, draft_tokens=40, accepted=25)
    assert contamination(quiet, tokens=40, requests=3, depth=4) == ""
    busy = AcceptanceSnapshot(drafts=80, draft_tokens=320, accepted=200)
    assert "other traffic on the server" in contamination(busy, tokens=40, requests=3, depth=4)
    restarted = AcceptanceSnapshot(drafts=-5, draft_tokens=0, accepted=0)
    assert "went down" in contamination(restarted, tokens=40, requests=3, depth=4)


def test_a_metrics_only_server_is_deferred_to_the_controller(traffic, tmp_path):
    base_url, stop = serve_in_thread("reference:?fault=collapse_long_prompts", base=ROOT, model_name="tiny")
    try:
        uri = f"openai:{base_url}?model=tiny&tokenizer={TARGET_DIR}"
        suite = suite_config_from_options({"baseline": f"hf:{TARGET_DIR}", "candidate": uri,
                                           "prompts": [f"jsonl:{traffic}"], "max_new_tokens": str(MAX_TOKENS),
                                           "report_dir": str(tmp_path)}, invocation_dir=ROOT)
        loop = BackgroundLoop()
        from spec_route_suite.routes.registry import build_route
        spec = suite.routes.candidates[0]
        worker = RouteHandle(build_route(spec), spec, loop, timeout_s=60.0)
        fitted = FittedPrompts(load_tokenizer(str(TARGET_DIR)), ContextFit((RouteContext("c", 512, "test"),)),
                               max_tokens=MAX_TOKENS)
        profile, deferred = class_profile(worker, class_requests(load("jsonl", traffic), fitted), depth=4,
                                          defer_server=True)
        assert deferred and profile == [], "a worker never trusts a shared server's counters"
        worker.close()
        loop.close()
        collector = SimpleNamespace(measurements={"class_acceptance_deferred": [
            {"route": "candidate", "test_id": "equivalence/test_class_acceptance.py::t[candidate]"}]})
        run_deferred_phases(suite, collector, log=lambda line: None)
        (measured,) = collector.measurements["class_acceptance"]
        assert "controller" in measured["measured_by"]
        by = {c["category"]: c for c in measured["classes"]}
        assert by["short"]["method"] == SERVER_COUNTERS and by["short"]["mean_acceptance_length"] > 2.0
        assert by["long"]["accepted"] == 0 and by["long"]["method"] != NONE
        (covered,) = collector.measurements["coverage"]
        assert covered["verified"] and covered["test_id"].endswith("[candidate]")
        assert "traffic/long" in class_problems(class_report(collector.measurements))[0]
    finally:
        stop()
