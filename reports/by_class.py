"""The run broken down by prompt class (source, category): acceptance and outcomes, and the classes where
speculation did nothing: a class that drafted and accepted nothing never ran its accept path (a "wait", named
class by class even when no class accepted anything); one that accepted almost nothing, below the floor of
reports/acceptance.py, barely ran it (a "wait" too, in its own words); one that drafted nothing while others
accepted is a gap.

Why: "acceptance falls on long code answers" and "the diverging prompts are all MT-Bench extraction" are what
an engineer qualifying a route on their workload needs to see. Folds two measurements:
- `class_acceptance` (equivalence/test_class_acceptance.py, or the controller's phases): per candidate, each
  class's answers, mean acceptance length, acceptance by position and the evidence it came from;
- `class_outcome` (the greedy, chat, distribution and task-accuracy checks): one per judged prompt, its class
  and outcome ("match", "diverged", "near-tie", "shift", "no shift found", "right", "wrong", "flipped under load").
Environment: none.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from spec_route_suite.reports.acceptance import below_floor

# drafted tokens all rejected before a class reads "accepted nothing": fewer may be chance (16 rejections in a row
# at a draft acceptance rate of 0.5 happen once in 65,536 classes)
COLLAPSE_MIN_DRAFT_TOKENS = 16


def class_report(measurements: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """{"acceptance": {route: {"measured_by", "classes"}}, "outcomes": [{check, route, source, category, counts}]}."""
    acceptance = {m["route"]: {"measured_by": m.get("measured_by", ""), "classes": list(m.get("classes", []))}
                  for m in measurements.get("class_acceptance", [])}
    counts: dict[tuple[str, str, str, str], Counter] = {}
    for m in measurements.get("class_outcome", []):
        key = (m.get("check", ""), m.get("route", ""), m.get("source", ""), m.get("category", ""))
        counts.setdefault(key, Counter())[m.get("outcome", "?")] += 1
    outcomes = [{"check": c, "route": r, "source": s, "category": g, "counts": dict(n)}
                for (c, r, s, g), n in sorted(counts.items())]
    return {"acceptance": acceptance, "outcomes": outcomes}


def _accepted_nothing(c: Mapping[str, Any]) -> bool:
    """Drafted past the minimum and accepted none: the class's accept path never ran."""
    return (c.get("draft_tokens") or 0) >= COLLAPSE_MIN_DRAFT_TOKENS and not c.get("accepted")


def _measured(classes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [c for c in classes if c.get("method") != "none" and c.get("answers")]


def collapsed_classes(classes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Classes on which speculation did nothing: every drafted token rejected past a minimum (whatever the other
    classes did: a total collapse names every class), or no drafts while another class of the same route accepted."""
    classes = _measured(classes)
    others_accept = any((c.get("accepted") or 0) > 0 for c in classes)
    return [c for c in classes if _accepted_nothing(c) or (others_accept and not c.get("draft_tokens"))]


def _profiles(by_class: Mapping[str, Any], route: str | None):
    return [(name, p) for name, p in sorted((by_class.get("acceptance") or {}).items()) if route in (None, name)]


def class_gaps(by_class: Mapping[str, Any], route: str | None = None) -> list[str]:
    """Verdict gaps (pilot): classes that drafted nothing while other classes of the route accepted (all
    candidates, or `route`)."""
    gaps = []
    for name, profile in _profiles(by_class, route):
        for c in collapsed_classes(profile["classes"]):
            if not _accepted_nothing(c):
                gaps.append(f"speculation does nothing on prompt class `{c['source']}/{c['category']}` of `{name}` "
                            f"(no drafts, while other classes accept): its checks exercised the target alone")
    return gaps


def class_problems(by_class: Mapping[str, Any], route: str | None = None) -> list[str]:
    """Verdict problems (wait): classes whose speculation drafted and accepted nothing, named one by one also when
    no class accepted anything, and classes that accepted almost nothing (all candidates, or `route`)."""
    problems = []
    for name, profile in _profiles(by_class, route):
        measured = _measured(profile["classes"])
        anywhere = any((c.get("accepted") or 0) > 0 for c in measured)
        for c in measured:
            little = below_floor(drafts=c.get("drafts"), draft_tokens=c.get("draft_tokens"), accepted=c.get("accepted"))
            if _accepted_nothing(c):
                problems.append(
                    f"speculation ran but accepted nothing on prompt class `{c['source']}/{c['category']}` of `{name}` "
                    f"({c['draft_tokens']} drafted tokens, none accepted, "
                    + ("while other classes accept" if anywhere else "nor on any other class")
                    + "): its accept path never ran there, so its checks on that class exercised the target alone")
            elif little:
                problems.append(
                    f"speculation ran but accepted almost nothing on prompt class `{c['source']}/{c['category']}` of "
                    f"`{name}` ({little}): its accept path barely ran there, so its checks on that class exercised "
                    f"the target almost alone")
    return problems


BAD_OUTCOMES = ("diverged", "shift", "flipped under load")   # what a class may show that the summary names


def markdown(by_class: Mapping[str, Any]) -> list[str]:
    """The summary's "By prompt class" section, a row per candidate: its mean acceptance length per class, and the
    classes where a check found a divergence, a shift or a flip (the full tables: report.json `by_class`)."""
    acceptance, outcomes = by_class.get("acceptance") or {}, by_class.get("outcomes") or []
    if not acceptance and not outcomes:
        return []
    routes = sorted({*acceptance, *(o["route"] for o in outcomes)})
    sources = {c["source"] for p in acceptance.values() for c in p["classes"]} | {o["source"] for o in outcomes}
    name = (lambda c: f"{c['source']}/{c['category']}") if len(sources) > 1 else (lambda c: c["category"])
    lines = ["", "## By prompt class", "", "| candidate | mean acceptance length by class | classes with a finding |",
             "|---|---|---|"]
    for route in routes:
        lengths = " · ".join(f"{name(c)} {_length(c)}" for c in (acceptance.get(route) or {}).get("classes", []))
        bad: dict[str, list[str]] = {}
        for o in outcomes:
            for what, n in o["counts"].items():
                if o["route"] == route and what in BAD_OUTCOMES and n:
                    bad.setdefault(name(o), []).append(f"{o['check']} {n} {what}")
        shown = "; ".join(f"{c}: {', '.join(v)}" for c, v in bad.items()) or "none"
        lines.append(f"| `{route}` | {lengths or 'n/a'} | {shown[:200]} |")
    return lines + [""]


def _length(c: Mapping[str, Any]) -> str:
    mal = c.get("mean_acceptance_length")
    return f"{mal:.2f}" if isinstance(mal, (int, float)) else ("n/a" if c.get("method") != "none" else "unknown")
