"""The verdict in a few lines: one line per gap kind, each gap once with the candidates it applies to.

Why: each candidate's verdict names every gap on its own (report.json route_verdicts: reason and gaps), so
with two candidates the same missing baseline feature is named twice, and a family's parts once each. Here
the gaps of all candidates are folded: by kind (a coverage status such as "not verified", or "settings",
"prompt set", "warnings"...), then by reason, the subjects that share a reason listed together and followed
by the candidates they apply to. What the verdicts mean does not change; the tables hold the details.
Environment: none.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

WHY_CHARS = 220
GAPS_LEAD = {True: "What keeps a candidate from ADOPT, each gap once with the candidates it applies to:",
             False: "Besides the findings, these gaps would keep a candidate from ADOPT (each once, with the candidates "
                    "it applies to):"}   # key: is the verdict pilot
SUBJECTS_SHOWN = 8


def _subjects(subjects: Sequence[str]) -> str:
    """"features: n, min_p; seeds": parts of one family after the family's name once."""
    families: dict[str, list[str]] = {}
    for subject in subjects:
        family, _, part = subject.partition(": ")
        families.setdefault(family, [])
        if part:
            families[family].append(part)
    shown = [f"{family}: {', '.join(parts[:SUBJECTS_SHOWN])}" + (f" and {len(parts) - SUBJECTS_SHOWN} more"
                                                                  if len(parts) > SUBJECTS_SHOWN else "")
             if parts else family for family, parts in families.items()]
    return "; ".join(shown)


def _short(text: str) -> str:
    return text if len(text) <= WHY_CHARS else text[:WHY_CHARS - 1].rstrip() + "…"


def _reason_key(why: str, subject: str) -> tuple[str, str]:
    """(grouping key, shown reason): the reason without its own subject's name, a leading "not verified: " or
    its numbers, so parts that fail for one reason share a line (the reason shows "…" for the part's name)."""
    part = subject.partition(": ")[2] or subject
    shown = why.removeprefix("not verified: ")
    if part:
        shown = shown.removeprefix(f"{part}: ")
        masked = re.sub(rf"(?<!\w){re.escape(part)}(?!\w)", "…", shown)
    else:
        masked = shown
    return re.sub(r"\d+(\.\d+)?", "N", masked), masked if masked != shown else shown


def gap_lines(report: Mapping[str, Any]) -> list[str]:
    """Markdown bullets, one per gap kind: "- **not verified**: mixing, aborts (why) on `a`; seeds (why) on `a`, `b`"."""
    verdicts = report.get("route_verdicts") or {}
    several = len(verdicts) > 1
    # kind -> reason key -> subject -> candidates (first-seen order everywhere)
    seen: dict[str, dict[str, dict[str, list[str]]]] = {}
    shown: dict[tuple[str, str], str] = {}
    alone: dict[tuple[str, str, str], str] = {}   # a subject's own reason, shown when no other shares its line
    for name, verdict in verdicts.items():
        for gap in verdict.get("gaps") or []:
            key, text = _reason_key(gap.get("why") or gap["text"], gap.get("subject", ""))
            shown.setdefault((gap["kind"], key), text)
            alone.setdefault((gap["kind"], key, gap.get("subject", "")), gap.get("why") or gap["text"])
            names = seen.setdefault(gap["kind"], {}).setdefault(key, {}).setdefault(gap.get("subject", ""), [])
            if name not in names:
                names.append(name)
    lines = []
    for kind, reasons in seen.items():
        parts = []
        for key, subjects in reasons.items():
            by_names: dict[tuple[str, ...], list[str]] = {}
            for subject, names in subjects.items():
                by_names.setdefault(tuple(names), []).append(subject)
            for names, group in by_names.items():
                where = f" on {', '.join(f'`{n}`' for n in names)}" if several else ""
                why = _short(shown[(kind, key)] if len(group) > 1 else
                             alone[(kind, key, group[0])].removeprefix("not verified: "))
                listed = _subjects([g for g in group if g])
                parts.append(f"{listed} ({why}){where}" if listed else f"{why}{where}")
        lines.append(f"- **{kind}**: " + "; ".join(parts))
    return lines


def headline_reason(report: Mapping[str, Any]) -> str:
    """The reason under the headline: as the verdict states it, except a pilot's gap list, which the lines
    below give once per kind."""
    if report.get("verdict") == "pilot" and any((v.get("gaps") for v in (report.get("route_verdicts") or {}).values())):
        count = len({g["text"] for v in report["route_verdicts"].values() for g in v.get("gaps") or []})
        return f"all checks that ran passed, but {count} gap(s) keep it from adopt (each named once below)"
    return _short(str(report.get("verdict_reason", "")))


def candidate_rows(report: Mapping[str, Any]) -> list[str]:
    """| candidate | verdict | why |: a pilot's why is its count of gaps, the lines below name them."""
    verdicts = report.get("route_verdicts") or {}
    if len(verdicts) < 2:
        return []
    rows = ["| candidate | verdict | why |", "|---|---|---|"]
    for name, v in verdicts.items():
        why = (f"{len(v.get('gaps') or [])} gap(s), below" if v["verdict"] == "pilot" and v.get("gaps")
               else _short(v["reason"]))
        rows.append(f"| `{name}` | **{v['verdict'].upper()}** | {why.replace('|', '/')} |")
    return rows + [""]
