"""One standalone repro script per finding cluster: repro/NNN-<engine>-<check>.py and its curl lines (.sh).

A check puts a repro block on its finding (reports/repro_spec.py): the exact request(s) as the candidate's
and the baseline's servers receive them, and the judge. Here the blocks of one cluster (up to MAX_CASES of
its findings) become one script: a docstring saying what it does and how to run it, the code (the adapters'
own answer reader, spec_route_suite/routes/answer_fields.py, and reports/repro_runtime.py, both verbatim, then
its judge cut from reports/repro_judges.py by reports/judge_source.py: python3 + httpx, nothing of this suite)
and the cases as DATA. An in-process route (hf, reference) is addressed as the in-process server serves it;
the docstring gives the command that starts it. API keys are read from the variables the routes name, never
written out.
Environment: none.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from spec_route_suite.routes import answer_fields
from spec_route_suite.routes.kinds import engine_of_kind, is_http_kind
from spec_route_suite.reports.clusters import checks_of, frequency
from spec_route_suite.reports.judge_source import judge_source, without_suite_only

RUNTIME = Path(__file__).with_name("repro_runtime.py")
ANSWERS = Path(answer_fields.__file__)   # the adapters' answer reader: the runtime reads the servers' answers with it
MAX_CASES = 3
MAX_SCRIPT_CHARS = 40_000      # the issue file quotes the script whole and stays under 60,000
IN_PROCESS_PORTS = {"baseline": 8000, "candidate": 8001}
SAME = "="                     # a baseline request identical to the candidate's is written once
TRIPLE = "'" * 3
JUDGES = {
    "parity": "the candidate's answer to each request differs from the baseline's (control: the baseline answers "
              "the same request alike twice; a case's history, the requests sent just before it in the run, is "
              "resent to each server first)",
    "stream": "the candidate streams a different answer than it returns unstreamed (control: the baseline's two "
              "deliveries of the same request)",
    "repeat": "the candidate answers the same seeded request differently (control: the baseline, twice)",
    "logprobs": "the candidate's logprobs are not the target's (control: the baseline's logprobs, twice)",
    "choices": "the candidate's n sampled choices are copies of each other (control: the baseline's n samples)",
    "rule": "the candidate's structured output is not the JSON it was asked for (control: the baseline's answer)",
    "distribution": "the candidate's samples do not follow the baseline's distribution (chi-square; control: the "
                    "baseline's samples, half against half)",
    "load": "requests answer differently under the shrunk concurrent schedule than alone (control: the same "
            "schedule on the baseline)",
    "error": "the request fails on the candidate (control: the baseline answers it)",
    "spec_path": "the family's requests draft nothing while plain requests draft, by the server's per-answer counters "
                 "(control: the baseline shows the same pattern)",
    "draft_history": "a greedy prompt answered alike before and after other requests drafts differently, by the "
                     "server's per-answer counters (control: the baseline drafts its prompts alike)",
    "turn_reuse": "turn 2 of a conversation computes more prompt tokens than the baseline's beyond the tolerance, by "
                  "the cached prompt tokens each server states (the baseline is the comparison)",
}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")[:40] or "route"


def engine_of(report: dict[str, Any], route: str) -> str:
    """The engine behind a route as its inventory names it (vllm, llama.cpp, sglang, reference, transformers),
    else as its wire kind's registration does (kinds.py: `llama-cpp:` names llama.cpp), else its kind."""
    inventory = (report.get("inventories") or {}).get(route) or {}
    kind = (_specs(report).get(route) or {}).get("kind")
    return str(inventory.get("engine") or engine_of_kind(kind) or kind or "engine")


def _specs(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    config = report.get("config") or {}
    specs = {c["name"]: c for c in config.get("candidates", [])}
    if config.get("baseline"):
        specs[config["baseline"]["name"]] = config["baseline"]
    return specs


def in_process_uri(spec: dict[str, Any]) -> str:
    """The URI that rebuilds an in-process route from its public spec (for the server command line)."""
    source = str(spec.get("source") or "")
    if source.startswith(f"{spec['kind']}:"):
        return source
    query = {k: str(spec[k]) for k in ("draft", "num_assistant_tokens", "prompt_lookup") if spec.get(k)}
    if spec.get("tokenizer") and spec["tokenizer"] != spec.get("model"):
        query["tokenizer"] = spec["tokenizer"]
    query.update({str(k): str(v) for k, v in (spec.get("options") or {}).items()})
    return f"{spec['kind']}:{spec.get('model') or ''}" + (f"?{urlencode(query, safe='/')}" if query else "")


def route_info(report: dict[str, Any], name: str, side: str) -> dict[str, Any]:
    """Where the script finds a route: its server's base URL, or the in-process server's and how to start it."""
    spec = _specs(report).get(name) or {"name": name, "kind": "unknown"}
    info = {"name": name, "kind": spec.get("kind"), "api_key_env": spec.get("api_key_env")}
    if is_http_kind(spec.get("kind")) and spec.get("base_url"):
        return {**info, "base_url": spec["base_url"]}
    port = IN_PROCESS_PORTS[side]
    return {**info, "base_url": f"http://127.0.0.1:{port}/v1",
            "serve": f"python -m spec_route_suite.servers.inprocess --route "
                     f"{shlex.quote(in_process_uri(spec))} --port {port}"}


def _dedupe(node: Any) -> Any:
    """Write a baseline request that equals the candidate's as SAME (the script expands it)."""
    if isinstance(node, dict):
        out = {k: _dedupe(v) for k, v in node.items()}
        if "candidate" in out and out.get("baseline") == out["candidate"] and isinstance(out["candidate"], dict):
            out["baseline"] = SAME
        return out
    if isinstance(node, list):
        return [_dedupe(v) for v in node]
    return node


def script_data(report: dict[str, Any], cluster: dict[str, Any]) -> dict[str, Any] | None:
    """DATA of the cluster's script: the first MAX_CASES repro blocks that share the first block's judge."""
    findings = report["findings"]
    blocks = [b for i in cluster["findings"] if isinstance(b := (findings[i].get("details") or {}).get("repro"), dict)
              and "judge" in b]
    if not blocks:
        return None
    first = blocks[0]
    same = [b for b in blocks if b["judge"] == first["judge"]][:MAX_CASES]
    routes = first.get("routes") or {"candidate": cluster["route"],
                                     "baseline": ((report.get("config") or {}).get("baseline") or {}).get("name")}
    cases = [_dedupe({k: v for k, v in b["case"].items() if k != "recorded"}) for b in same]
    return {"cluster": cluster["id"], "title": cluster["title"][:300], "check": cluster["check"],
            "judge": first["judge"], "attempts": max(int(b.get("attempts") or 1) for b in same),
            "routes": {side: route_info(report, name, side) for side, name in routes.items()}, "cases": cases}


def render_script(report: dict[str, Any], cluster: dict[str, Any], data: dict[str, Any], filename: str) -> str:
    routes = data["routes"]
    servers = "\n".join(f"  {side:9s} {info['base_url']}  ({info['name']}, {info['kind']}"
                        + (f"; start it: {info['serve']})" if info.get("serve") else ")")
                        for side, info in routes.items())
    title = cluster["title"].replace('"""', "'''").replace("\\", "/")
    header = (f'#!/usr/bin/env python3\n"""Repro {cluster["id"]:03d}: {title[:300]}\n\n'
              f'Check {checks_of(cluster)} ({cluster["severity"]}): {frequency(cluster)}.\n'
              f'Judge "{data["judge"]}": {JUDGES[data["judge"]]}.\n'
              f'Servers (override with --candidate-url / --baseline-url, or REPRO_CANDIDATE_URL / REPRO_BASELINE_URL):\n'
              f'{servers}\n'
              f'Run: python3 {filename}    (needs only httpx: pip install httpx)\n'
              f'Exit 1: the candidate\'s failure reproduced and the baseline does not show it; 0: not reproduced, '
              f'or the baseline\nshows it too; 2: a server gave no answer. '
              f'Generated by spec-route-suite {report.get("suite_version", "")}, run {report.get("run_id")}.\n"""\n')
    judges = judge_source(data["judge"])
    return (f"{header}{runtime_source()}\n\n{judges}\n\n\nDATA = json.loads(r{TRIPLE}{data_json(data)}{TRIPLE})\n\n"
            f"if __name__ == \"__main__\":\n    sys.exit(main(DATA, JUDGES))\n")


def runtime_source() -> str:
    """The code every script carries before its judge: the answer reader, then the runtime."""
    return f"{ANSWERS.read_text()}\n\n{without_suite_only(RUNTIME.read_text())}"


def data_json(data: dict[str, Any]) -> str:
    """DATA as indented JSON with every list of numbers on one line (prompts are hundreds of ids). Nothing in it
    can end the raw string it sits in: JSON has single quotes only inside strings, where \\u0027 means the same."""
    text = json.dumps(data, indent=1, ensure_ascii=True)
    text = re.sub(r"\[\s*(-?[\d.eE+-]+(?:,\s*-?[\d.eE+-]+)*)\s*\]",
                  lambda m: "[" + ", ".join(re.split(r",\s*", m.group(1))) + "]", text)
    return text.replace(TRIPLE, "\\u0027" * 3)


def _shrunk(data: dict[str, Any]) -> dict[str, Any]:
    """Smaller DATA for a script over MAX_SCRIPT_CHARS: one case, then a load schedule of its last 8 steps, or a
    history of its last request."""
    if len(data["cases"]) > 1:
        return {**data, "cases": data["cases"][:1]}
    case = data["cases"][0]
    if data["judge"] == "load" and len(case.get("steps", [])) > 8:
        return {**data, "cases": [{**case, "steps": case["steps"][-8:]}]}
    if len(case.get("history", [])) > 1:
        return {**data, "cases": [{**case, "history": case["history"][-1:]}]}
    return data


def _requests(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The (candidate, baseline) request pairs of a case, in the order the judge sends them."""
    if "requests" in case:
        return [*case.get("history", []), *case["requests"]]
    if "steps" in case:
        return [step["request"] for step in case["steps"]]
    if "family" in case:   # spec_path: plain requests, then the family's
        return [*case["plain"], *case["family"]]
    if "order" in case:    # draft_history: every request in the order sent
        return case["order"]
    if "conversations" in case:   # turn_reuse: each conversation's two turns
        return [c[turn] for c in case["conversations"] for turn in ("turn1", "turn2")]
    return [case[k] for k in ("plain", "stream", "request") if k in case]


def render_curl(data: dict[str, Any]) -> str:
    """curl lines for the first case: each request to the candidate, then to the baseline (the control)."""
    routes = data["routes"]
    lines = ["#!/bin/sh", f"# Repro {data['cluster']:03d} ({data['check']}, judge {data['judge']}): resend the failing "
                          f"request(s) by hand; the python script beside this file compares the answers.",
             f"CANDIDATE_URL=${{CANDIDATE_URL:-{routes['candidate']['base_url']}}}",
             f"BASELINE_URL=${{BASELINE_URL:-{routes['baseline']['base_url']}}}"]
    for side, var in (("candidate", "CANDIDATE_URL"), ("baseline", "BASELINE_URL")):
        key = routes[side].get("api_key_env")
        auth = f' -H "Authorization: Bearer ${key}"' if key else ""
        lines.append(f"echo '== {side} ({routes[side]['name']}) =='")
        for pair in _requests(data["cases"][0])[:8]:
            sent = pair["candidate"] if pair[side] == SAME else pair[side]
            body = json.dumps(sent["body"]).replace("'", "'\\''")
            lines.append(f"curl -s \"${var}{sent['path']}\" -H 'Content-Type: application/json'{auth} -d '{body}'; "
                         f"echo")
    return "\n".join(lines) + "\n"


def render_cluster(report: dict[str, Any], cluster: dict[str, Any], name: str) -> tuple[str, str, dict] | None:
    """(script, curl lines, DATA) of a cluster's repro at repro/`name`, shrunk to MAX_SCRIPT_CHARS where it can
    be; None when no finding of the cluster carries a repro block."""
    data = script_data(report, cluster)
    if data is None:
        return None
    script = render_script(report, cluster, data, f"{name}.py")
    while len(script) > MAX_SCRIPT_CHARS and _shrunk(data) != data:
        data = _shrunk(data)
        script = render_script(report, cluster, data, f"{name}.py")
    return script, render_curl(data), data


def write_repro_scripts(run_dir: Path, report: dict[str, Any], clusters: list[dict[str, Any]],
                        redact=lambda text: text) -> list[str]:
    """Write each cluster's script and curl lines; sets cluster["repro"] (its two paths, [] when no finding of
    the cluster carried a repro block) and returns every path written, relative to the run folder."""
    written = []
    for cluster in clusters:
        name = f"repro/{cluster['id']:03d}-{slug(engine_of(report, cluster['route']))}-{slug(cluster['check'])}"
        rendered = render_cluster(report, cluster, name)
        cluster["repro"] = []
        if rendered is None:
            continue
        script, curl, data = rendered
        path = run_dir / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(redact(script))
        path.chmod(0o755)
        (run_dir / f"{name}.sh").write_text(redact(curl))
        cluster["repro"] = [f"{name}.py", f"{name}.sh"]
        cluster["repro_routes"] = data["routes"]
        written += cluster["repro"]
    return written
