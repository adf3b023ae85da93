"""The run broken down by prompt class (source, category): acceptance and outcomes, and the classes where
speculation did nothing.

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

COLLAPSE_MIN_DRAFT_TOKENS = 16   # equivalence/class_acceptance.py MIN_DRAFT_TOKENS (reports never import checks)


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


def collapsed_classes(classes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Classes on which speculation did nothing (no drafts, or every drafted token rejected past a minimum) while
    another class of the same route accepted drafts."""
    classes = [c for c in classes if c.get("method") != "none" and c.get("answers")]
    if not any((c.get("accepted") or 0) > 0 for c in classes):
        return []
    return [c for c in classes if not c.get("draft_tokens")
            or (c["draft_tokens"] >= COLLAPSE_MIN_DRAFT_TOKENS and not c.get("accepted"))]


def class_gaps(by_class: Mapping[str, Any], route: str | None = None) -> list[str]:
    """Verdict lines for the classes where speculation did nothing (all candidates, or `route`)."""
    gaps = []
    for name, profile in sorted((by_class.get("acceptance") or {}).items()):
        if route is not None and name != route:
            continue
        for c in collapsed_classes(profile["classes"]):
            what = (f"{c['draft_tokens']} drafted tokens, none accepted" if c.get("draft_tokens") else "no drafts")
            gaps.append(f"speculation does nothing on prompt class `{c['source']}/{c['category']}` of `{name}` "
                        f"({what}, while other classes accept): its checks exercised the target alone")
    return gaps


def markdown(by_class: Mapping[str, Any]) -> list[str]:
    """The summary's "By prompt class" section (nothing when no check measured classes)."""
    acceptance, outcomes = by_class.get("acceptance") or {}, by_class.get("outcomes") or []
    if not acceptance and not outcomes:
        return []
    lines = ["", "## By prompt class", ""]
    if acceptance:
        lines += ["| candidate | class | answers | mean acceptance length | acceptance by position | evidence |",
                  "|---|---|---|---|---|---|"]
        for route, profile in sorted(acceptance.items()):
            for c in profile["classes"]:
                rates = ", ".join(f"{r:.2f}" for r in c.get("per_position_acceptance_rate") or []) or "n/a"
                mal = c.get("mean_acceptance_length")
                shown = f"{mal}" if mal is not None else ("n/a" if c.get("method") != "none" else f"unknown ({c['why']})")
                lines.append(f"| `{route}` | {c['source']}/{c['category']} | {c['answers']} | {shown} | {rates} | "
                             f"{c['method']} |")
        measured = sorted({f"`{r}` {p['measured_by']}" for r, p in acceptance.items() if p.get("measured_by")})
        lines += ["", f"Measured: {'; '.join(measured)}.", ""]
    if outcomes:
        checks = list(dict.fromkeys(o["check"] for o in outcomes))
        lines += ["| candidate | class | " + " | ".join(checks) + " |", "|---|---|" + "---|" * len(checks)]
        rows: dict[tuple[str, str, str], dict[str, str]] = {}
        for o in outcomes:
            cell = ", ".join(f"{n} {what}" for what, n in sorted(o["counts"].items()))
            rows.setdefault((o["route"], o["source"], o["category"]), {})[o["check"]] = cell
        for (route, source, category), cells in sorted(rows.items()):
            lines.append(f"| `{route}` | {source}/{category} | " + " | ".join(cells.get(c, "-") for c in checks) + " |")
        lines += ["", "One count per judged prompt (chat and task accuracy: per turn; distribution: per prompt and "
                      "sampling setting)."]
    return lines
