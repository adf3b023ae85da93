"""summary.md: what a person reads first, in a minute, short enough to paste into a GitHub comment.

The verdict with a one-line legend of the four words, one row per candidate (its verdict, bug count and one-line
reason), the gaps as a table (kind, families, candidates, why in one clause, how to close it: reports/gaps.py),
the family x candidate matrix, the finding clusters (one line each, with their issue file and repro script),
whether speculation ran, the speed gate, engine behaviour and notes. The details live in report.json,
report.html (every coverage row with what it could detect) and issues/ (one per cluster). Sections that do
not fit are cut from the end of the priority order, each leaving a line that says where it went.
Environment: none.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from spec_route_suite.reports import by_class
from spec_route_suite.reports.clusters import checks_of, frequency
from spec_route_suite.reports.compare import LISTED, render_comparison
from spec_route_suite.reports.matrix import coverage_matrix, in_family_order
from spec_route_suite.reports.speed import shape, speed_rows
from spec_route_suite.reports.gaps import gap_rows
from spec_route_suite.reports.terminal import short_reason

MAX_CHARS = 12_000   # a failing multi-candidate run; the default run's is under 6,000 (tests/test_summary.py)
CLUSTERS_SHOWN = 15
ENGINE_NOTES_SHOWN = 6
NOTES_SHOWN = 6
LINE_CHARS = 200
CELL_CHARS = 200     # no table cell or bullet longer
NOTE_CHARS = 320     # a note names what it did to which prompts: room for both


def _cut(text: str, limit: int = LINE_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _md(text: str) -> str:
    """Text from a server or a title, safe in a table cell or a bullet: no HTML block, no column break."""
    return str(text).replace("<", "&lt;").replace("|", "\\|")


LEGEND = ("**ADOPT** promote it · **PILOT** nothing failed, but some checks could not be verified (the gaps) · "
          "**WAIT** investigate before promoting (route errors, broken evidence) · **AVOID** a correctness bug")


def _head(report: dict[str, Any]) -> list[str]:
    incomplete = "" if report["complete"] else " — **INCOMPLETE**: interrupted or a worker crashed; results are partial"
    return [f"# Route qualification: **{report['verdict'].upper()}**", "", LEGEND, "",
            *_candidates(report), *_gaps(report),
            f"Run `{report['run_id']}`, {report['duration_s']:.0f} s{incomplete}. {_routes_line(report)} "
            f"Details: report.html (every coverage row with its reason), report.json (everything).", "",
            *[f"> **Warning**: {_md(_cut(w, CELL_CHARS))}" for w in report.get("warnings", [])],
            *([""] if report.get("warnings") else [])]


def _candidates(report: dict[str, Any]) -> list[str]:
    """| candidate | verdict | bug findings | why |: one row each, the reason in one line."""
    verdicts = report.get("route_verdicts") or {}
    rows = ["| candidate | verdict | bug findings | why |", "|---|---|---|---|"]
    for name, verdict in verdicts.items():
        rows.append(f"| `{name}` | **{verdict['verdict'].upper()}** | {bug_count(report, name)} | "
                    f"{_md(short_reason(verdict))} |")
    return rows + [""]


def bug_count(report: dict[str, Any], name: str) -> int:
    """The candidate's bug findings (a bug cluster may also hold the route errors of the same cause: not counted)."""
    return sum(1 for f in report.get("findings") or [] if f.get("route") == name and f.get("severity") == "bug")


def gaps_lead(report: dict[str, Any]) -> str:
    return ("what keeps a candidate from ADOPT" if report["verdict"] == "pilot"
            else "besides the findings, what would keep a candidate from ADOPT")


def _gaps(report: dict[str, Any]) -> list[str]:
    rows = gap_rows(report.get("route_verdicts") or {})
    if not rows:
        return []
    several = len(report.get("route_verdicts") or {}) > 1
    lines = [f"## Gaps ({len(rows)}): {gaps_lead(report)}", "",
             "| gap | families | " + ("candidates | " if several else "") + "why | how to close it |",
             "|---|---|" + ("---|" if several else "") + "---|---|"]
    total = len(report.get("route_verdicts") or {})
    for row in rows:
        candidates = f"{_names(row['candidates'], total=total)} | " if several else ""
        lines.append(f"| {row['kind']} | {_md(_cut(', '.join(row['families']) or '-', CELL_CHARS))} | {candidates}"
                     f"{_md(_cut(row['why'], CELL_CHARS))} | {_md(_cut(row['close'], CELL_CHARS))} |")
    return lines + [""]


NAMES_SHOWN = 6   # candidates a cell or a line names before "and N more" (a run may judge dozens)


def _names(names: list[str], *, total: int) -> str:
    """"`a`, `b`", "all 41 candidates", or the first NAMES_SHOWN and how many more."""
    if len(names) == total and total > NAMES_SHOWN:
        return f"all {total} candidates"
    shown = ", ".join(f"`{n}`" for n in names[:NAMES_SHOWN])
    return shown + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")


def _routes_line(report: dict[str, Any]) -> str:
    config = report.get("config", {})
    baseline = config.get("baseline", {})
    candidates = config.get("candidates", [])
    names = ", ".join(f"`{c.get('name')}` ({c.get('kind')})" for c in candidates[:NAMES_SHOWN])
    more = f" and {len(candidates) - NAMES_SHOWN} more (report.json `config`)" if len(candidates) > NAMES_SHOWN else ""
    return f"Baseline `{baseline.get('name')}` ({baseline.get('kind')}) vs {names}{more}."


def _matrix(report: dict[str, Any]) -> list[str]:
    matrix = report.get("matrix") or coverage_matrix(report)
    names = [c.get("name") for c in report.get("config", {}).get("candidates", [])]
    lines = ["## Coverage by family", "", "| family | " + " | ".join(f"`{n}`" for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for family in in_family_order(matrix):
        cells = matrix[family]
        lines.append(f"| {family} | " + " | ".join(compact(cells[n]) if n in cells else "?" for n in names) + " |")
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(report.get("counts", {}).items()))
    return lines + ["", f"yes / partly / no: every, some or none of a family's parts verified (k/n: its instances "
                        f"verified, per prompt, parameter or detector). Tests: {counts or 'none'}.", ""]


def compact(cell: dict[str, str]) -> str:
    """"yes 70/70", "no 0/2", "n/a": a matrix cell in a few characters."""
    found = re.match(r"(\d+) of (\d+) instances verified", cell.get("instances") or "")
    return f"{cell['status']} {found.group(1)}/{found.group(2)}" if found else cell["status"]


def _clusters(report: dict[str, Any], shown: int = CLUSTERS_SHOWN) -> list[str]:
    clusters = report.get("clusters") or []
    total = len(report.get("findings") or [])
    if not clusters:
        return [f"## Findings", "", "None (no bug, error, near-tie or warning)." if not total else
                f"No bug, error, near-tie or warning; {total} info and engine line(s) in report.json.", ""]
    lines = [f"## Findings: {len(clusters)} cause(s) from {sum(c['count'] for c in clusters)} finding(s)", "",
             "| # | severity | check | route | how often | finding | issue / repro |", "|---|---|---|---|---|---|---|"]
    for cluster in clusters[:shown]:
        files = ", ".join(f"[{p.split('/')[-1]}]({p})" for p in [cluster.get("issue"), *(cluster.get("repro") or [])[:1]]
                          if p) or "-"
        if cluster.get("not_filed"):
            files += f"; no issue: {_md(_cut(cluster['not_filed'], 120))}"
        lines.append(f"| {cluster['id']} | {cluster['severity']} | {checks_of(cluster)} | `{cluster['route']}` | "
                     f"{_md(frequency(cluster) + _prompts(cluster))} | {_md(_cut(cluster['title'], 160))} | {files} |")
    if len(clusters) > shown:
        lines.append(f"\n... and {len(clusters) - shown} more cause(s): report.json `clusters`, issues/.")
    return lines + ["", "An issue file is written for each cause an engine's maintainer can act on (a candidate's "
                        "bug or route error the baseline does not show), in the engine's bug template with the repro "
                        "quoted whole and its `gh issue create` line at the top; nothing in it is ticked for you. "
                        "Each repro script resends the failing request(s) to the candidate and to the baseline as the "
                        "control and exits 1 when the failure reproduces on the candidate alone.", ""]


def _prompts(cluster: dict[str, Any]) -> str:
    """" (prompts math-00, chat-01, ...)": the cause's first prompts (a cause crossing checks has one example title)."""
    shown = cluster.get("prompts") or []
    more = ", ..." if cluster.get("prompts_total", 0) > len(shown) else ""
    return f" (prompts {', '.join(shown)}{more})" if shown else ""


def _speculation(report: dict[str, Any]) -> list[str]:
    rows = report.get("speculation") or []
    if not rows:
        return []
    lines = ["## Speculation", "", "| candidate | speculation | mean acceptance length | acceptance by position |"
             " counters | by traffic (the answers' own counters) |", "|---|---|---|---|---|---|"]
    by_traffic = report.get("acceptance_by_traffic") or {}
    emitted_shown = False
    for row in rows:
        acc = (report.get("acceptance") or {}).get(row["route"]) or {}
        emitted_shown |= _overcounted(acc)
        rates = ", ".join(f"{r:.2f}" for r in acc.get("per_position_acceptance_rate") or []) or "n/a"
        invariants = {True: "hold", False: "BROKEN"}.get(acc.get("invariants_hold"), "n/a")
        broken = [name for name, ok in (acc.get("invariants") or {}).items() if ok is False]
        if broken:
            invariants += f" ({', '.join(broken)})"
        lines.append(f"| `{row['route']}` | {_md(_cut(row['status'], 80))} | {_length(acc)} | "
                     f"{rates} | {invariants} | {_by_traffic(by_traffic.get(row['route']))} |")
    notes = (["By traffic: greedy and sampled answers apart, from each answer's own counters (llama.cpp: a lower "
              "bound); the mean acceptance length beside it covers all of the run's traffic."] if by_traffic else [])
    if emitted_shown:
        notes.append("By emitted tokens: (output tokens - finished requests) / drafts, beside counters that claim "
                     "more accepted tokens than the server emitted.")
    return lines + ["", *notes, ""] if notes else lines + [""]


def _length(acc: dict[str, Any]) -> str:
    """"3.0558 (2.759 by emitted tokens)": the counters' figure, and the one from what the server emitted when the
    counters claim more accepted tokens than were emitted (vLLM counts drafts past a request's end)."""
    length = acc.get("mean_acceptance_length") or "n/a"
    return f"{length} ({acc['emitted_per_draft_step']} by emitted tokens)" if _overcounted(acc) else str(length)


def _overcounted(acc: dict[str, Any]) -> bool:
    """The counters claim more accepted tokens than the server emitted, and the emitted figure is known."""
    return (acc.get("emitted_per_draft_step") is not None
            and (acc.get("invariants") or {}).get("accepted_le_emitted") is False)


def _by_traffic(bands: dict[str, Any] | None) -> str:
    """"greedy 3.91 (812 answers); sampled, T <= 1 2.8 (40 answers)": what each kind of traffic got."""
    if not bands:
        return "n/a (no answer states them)"
    return "; ".join(f"{name} {_two(tally['mean_acceptance_length'])} ({tally['answers']})"
                     if tally.get("draft_tokens") else f"{name}: nothing drafted ({tally['answers']})"
                     for name, tally in bands.items())


def _two(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "n/a"


def _by_class(report: dict[str, Any]) -> list[str]:
    """Acceptance and outcomes per prompt class (the user's workload), when the run had classes."""
    lines = by_class.markdown(report.get("by_class") or {})
    return [*lines, ""] if lines else []


def _engine_behaviour(report: dict[str, Any]) -> list[str]:
    """What the baseline does the same way on the same request: one line per distinct note, not a finding."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for note in (f for f in report.get("findings", []) if f.get("severity") == "engine"):
        grouped.setdefault((note["check"], note["title"]), []).append(note)
    if not grouped:
        return []
    lines = ["## Engine behaviour (both routes)", "",
             "The baseline breaks these rules the same way on the same request: engine behaviour, not a speculation "
             "finding (each rule's part of the coverage reads \"not verified\").", ""]
    for (check, title), same in list(grouped.items())[:ENGINE_NOTES_SHOWN]:
        requests = [r for n in same for r in (n.get("details") or {}).get("requests", [])]
        shown = ", ".join(f"`{r}`" for r in requests[:2]) + (f" and {len(requests) - 2} more" if len(requests) > 2 else "")
        lines.append(f"- **{check}**: {_md(_cut(title, 200))} — route `{same[0]['route']}`, {len(same)} test(s); "
                     f"request(s) {shown or 'n/a'}")
    if len(grouped) > ENGINE_NOTES_SHOWN:
        lines.append(f"- ... and {len(grouped) - ENGINE_NOTES_SHOWN} more in report.json")
    return lines + [""]


def _notes(report: dict[str, Any]) -> list[str]:
    notes = report.get("notes") or []
    if not notes:
        return []
    return ["## Notes", "", *[f"- {_md(_cut(n, NOTE_CHARS))}" for n in notes[:NOTES_SHOWN]],
            *([f"- ... and {len(notes) - NOTES_SHOWN} more in report.json"] if len(notes) > NOTES_SHOWN else []), ""]


def _inventory(report: dict[str, Any]) -> list[str]:
    inventories = report.get("inventories") or {}
    if not inventories:
        return []
    lines = ["## Routes", "", "| route | engine | model | draft | speculation | dtype | max len | hardware |",
             "|---|---|---|---|---|---|---|---|"]
    for name, inv in inventories.items():
        spec = inv.get("speculation") or {}
        lines.append(f"| `{name}` | {_md(inv.get('engine'))} {_md(inv.get('version', ''))} | {_md(inv.get('model'))} | "
                     f"{_md(inv.get('draft') or '-')} | {_md(_cut(', '.join(f'{k}={v}' for k, v in spec.items()), 120))} | "
                     f"{inv.get('dtype')} | {inv.get('max_model_len')} | {_md(_cut(inv.get('hardware', ''), 60))} |")
    parity = [p for p in report.get("parity", []) if p.get("warning")]
    accounting = report["findings_accounting"]
    lost = accounting["recorded"] - accounting["received"]
    return lines + ["", *[f"- baseline parity: {_md(_cut(p['warning']))}" for p in parity],
                    *([f"**{lost} finding(s) recorded by workers were lost** (report.json findings_accounting)."]
                      if lost else []), ""]


def _speed(report: dict[str, Any]) -> list[str]:
    """The speed gate in a line per candidate (measured, never judged); its table and charts: report.html."""
    measured = speed_rows(report)
    if not measured:
        return []
    return ["## Speed gate (measured, not judged)", "",
            *[f"- `{m['candidate']}` vs `{m.get('baseline')}`: {shape(m)} ({m.get('prompts')} prompts x "
              f"{m.get('max_tokens')} tokens; per level: report.html)" for m in measured], ""]


def _comparison(report: dict[str, Any], listed: int = LISTED) -> list[str]:
    return [*render_comparison(report["comparison"], listed=listed), ""] if report.get("comparison") else []


# (section, where its content goes when it does not fit) in the order they are given up
SECTIONS: list[tuple[Callable[[dict[str, Any]], list[str]], str]] = [
    (_head, ""), (_matrix, "report.html"), (_clusters, "report.json `clusters` and issues/"),
    (_comparison, "report.json `comparison`"),   # a nightly job's reason to read: given up after the profiles
    (_speculation, "report.json `speculation`"), (_by_class, "report.json `by_class`"),
    (_speed, "report.html"), (_inventory, "report.json `inventories`"),
    (_engine_behaviour, "report.json `findings` (severity engine)"), (_notes, "report.json `notes`"),
]


CLUSTERS_TIGHT = 6   # causes the findings table keeps when the summary is too long for CLUSTERS_SHOWN
# the sections' tight forms, tried before any section is given up: fewer causes, the comparison's findings counted
TIGHT = {_clusters: lambda report: _clusters(report, shown=CLUSTERS_TIGHT),
         _comparison: lambda report: _comparison(report, listed=0)}


def render_summary(report: dict[str, Any]) -> str:
    """The sections in order within MAX_CHARS: when they do not fit, the findings table and the comparison first
    take their tight forms (TIGHT), then sections are given up from the last (each leaves a line saying where it
    went), and a section given up while a later, larger one was still there comes back when it fits."""
    parts = [_single_blank(render(report)) for render, _ in SECTIONS]

    def size() -> int:
        return len("\n".join(line for lines in parts for line in lines))
    if size() > MAX_CHARS:
        parts = [_single_blank(TIGHT[render](report)) if render in TIGHT else lines
                 for (render, _), lines in zip(SECTIONS, parts)]
    given_up = []
    for index in [i for i in range(len(parts) - 1, 0, -1) if parts[i]]:
        if size() <= MAX_CHARS:
            break
        title = next((line.lstrip("# ") for line in parts[index] if line.startswith("#")), "a section")
        kept, parts[index] = parts[index], [f"({title}: does not fit the summary's {MAX_CHARS} characters; see "
                                            f"{SECTIONS[index][1]})", ""]
        given_up.append((index, kept))
    for index, kept in reversed(given_up):   # the most important first
        placeholder, parts[index] = parts[index], kept
        if size() > MAX_CHARS:
            parts[index] = placeholder
    text = "\n".join(line for lines in parts for line in lines)
    return re.sub(r"\n{3,}", "\n\n", text)[:MAX_CHARS - 1].rstrip("\n") + "\n"


def _single_blank(lines: list[str]) -> list[str]:
    """A section's lines without a leading blank line (the previous section ends with one)."""
    while lines and not lines[0].strip():
        lines = lines[1:]
    return lines
