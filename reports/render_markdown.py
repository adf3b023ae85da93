"""summary.md: what a maintainer reads first, under MAX_CHARS for any run (a GitHub comment holds 65,536).

The verdict and its reason, each candidate's verdict, the gaps (one line per kind, reports/verdict_lines.py),
the family x candidate matrix, the finding clusters (one line each, with their issue file and repro script),
whether speculation ran, the speed gate, engine behaviour and notes. The details live in report.json,
report.html (every coverage row with what it could detect) and issues/ (one per cluster). Sections that do
not fit are cut from the end of the priority order, each leaving a line that says where it went.
Environment: none.
"""
from __future__ import annotations

from typing import Any, Callable

from spec_route_suite.reports import by_class
from spec_route_suite.reports.clusters import checks_of, frequency
from spec_route_suite.reports.compare import render_comparison
from spec_route_suite.reports.matrix import coverage_matrix, shown
from spec_route_suite.reports.speed import speed_section
from spec_route_suite.reports.verdict_lines import GAPS_LEAD, candidate_rows, gap_lines, headline_reason

MAX_CHARS = 20_000
CLUSTERS_SHOWN = 40
ENGINE_NOTES_SHOWN = 12
NOTES_SHOWN = 12
LINE_CHARS = 300


def _cut(text: str, limit: int = LINE_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _md(text: str) -> str:
    """Text from a server or a title, safe in a table cell or a bullet: no HTML block, no column break."""
    return str(text).replace("<", "&lt;").replace("|", "\\|")


def _head(report: dict[str, Any]) -> list[str]:
    incomplete = "" if report["complete"] else " — **INCOMPLETE**: interrupted or a worker crashed; results are partial"
    gaps = gap_lines(report)
    return [f"# Route qualification: **{report['verdict'].upper()}**", "", f"{_md(headline_reason(report))}.", "",
            *candidate_rows(report),
            *([GAPS_LEAD[report["verdict"] == "pilot"], "", *gaps, ""] if gaps else []),
            f"Run `{report['run_id']}`, {report['duration_s']} s{incomplete}. {_routes_line(report)}", "",
            *[f"> **Warning**: {_md(_cut(w))}" for w in report.get("warnings", [])],
            *([""] if report.get("warnings") else [])]


def _routes_line(report: dict[str, Any]) -> str:
    config = report.get("config", {})
    baseline = config.get("baseline", {})
    names = ", ".join(f"`{c.get('name')}` ({c.get('kind')})" for c in config.get("candidates", []))
    return f"Baseline `{baseline.get('name')}` ({baseline.get('kind')}) vs candidate(s) {names}."


def _matrix(report: dict[str, Any]) -> list[str]:
    matrix = report.get("matrix") or coverage_matrix(report)
    names = [c.get("name") for c in report.get("config", {}).get("candidates", [])]
    lines = ["## Coverage by family", "", "| family | " + " | ".join(f"`{n}`" for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for family, cells in matrix.items():
        lines.append(f"| {family} | " + " | ".join(shown(cells[n]) if n in cells else "?" for n in names) + " |")
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(report.get("counts", {}).items()))
    return lines + ["", f"yes: every part verified (a part only when every instance planned for it, per prompt, route "
                        f"parameter or detector, ran with evidence); partly: some; no: not verified. Why, part by "
                        f"part: the coverage table in report.html and report.json. Tests: {counts or 'none'}.", ""]


def _clusters(report: dict[str, Any]) -> list[str]:
    clusters = report.get("clusters") or []
    total = len(report.get("findings") or [])
    if not clusters:
        return [f"## Findings", "", "None (no bug, error, near-tie or warning)." if not total else
                f"No bug, error, near-tie or warning; {total} info and engine line(s) in report.json.", ""]
    lines = [f"## Findings: {len(clusters)} cause(s) from {sum(c['count'] for c in clusters)} finding(s)", "",
             "| # | severity | check | route | how often | finding | issue / repro |", "|---|---|---|---|---|---|---|"]
    for cluster in clusters[:CLUSTERS_SHOWN]:
        files = ", ".join(f"[{p.split('/')[-1]}]({p})" for p in [cluster.get("issue"), *(cluster.get("repro") or [])[:1]]
                          if p) or "-"
        if cluster.get("not_filed"):
            files += f"; no issue: {_md(_cut(cluster['not_filed'], 120))}"
        lines.append(f"| {cluster['id']} | {cluster['severity']} | {checks_of(cluster)} | `{cluster['route']}` | "
                     f"{_md(frequency(cluster) + _prompts(cluster))} | {_md(_cut(cluster['title'], 220))} | {files} |")
    if len(clusters) > CLUSTERS_SHOWN:
        lines.append(f"\n... and {len(clusters) - CLUSTERS_SHOWN} more cause(s): report.json `clusters`, issues/.")
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
             " counter invariants | by traffic (the answers' own counters) |", "|---|---|---|---|---|---|"]
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
        lines.append(f"| `{row['route']}` | {row['status']} | {_length(acc)} | "
                     f"{rates} | {invariants} | {_by_traffic(by_traffic.get(row['route']))} |")
    if by_traffic:
        lines += ["", "By traffic: 1 + accepted / steps over the answers (n=1) that state their own counters, greedy "
                      "and sampled apart; where an engine states no drafting steps per answer (llama.cpp), its decode "
                      "steps stand in, so the figure is a lower bound. The mean acceptance length beside it is the "
                      "server's counters over all of the run's traffic."]
    if emitted_shown:
        lines += ["", "By emitted tokens: (output tokens - finished requests) / drafts, from the server's own counters, "
                      "beside a mean acceptance length whose accepted count exceeds what the server emitted (drafts "
                      "counted as accepted past a request's end): the figure to compare; an upper bound where some "
                      "steps decode without a draft."]
    return lines + [""]


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
        return "n/a (no answer states its own counters)"
    return "; ".join(f"{name} {tally['mean_acceptance_length'] or 'n/a'} ({tally['answers']} answers)"
                     if tally.get("draft_tokens") else f"{name}: nothing drafted ({tally['answers']} answers)"
                     for name, tally in bands.items())


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
    return ["## Notes", "", *[f"- {_md(_cut(n))}" for n in notes[:NOTES_SHOWN]],
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
    return lines + ["", *[f"- baseline parity: {_md(_cut(p['warning']))}" for p in parity],
                    f"Findings recorded by workers: {accounting['recorded']}, received: {accounting['received']}. "
                    f"Everything else (configuration, latency, memory, every finding's evidence): report.json.", ""]


def _comparison(report: dict[str, Any]) -> list[str]:
    return [*render_comparison(report["comparison"]), ""] if report.get("comparison") else []


# (section, where its content goes when it does not fit) in the order they are given up
SECTIONS: list[tuple[Callable[[dict[str, Any]], list[str]], str]] = [
    (_head, ""), (_matrix, "report.html"), (_clusters, "report.json `clusters` and issues/"),
    (_speculation, "report.json `speculation`"), (_by_class, "report.json `by_class`"),
    (speed_section, "report.json `measurements.speed`"),
    (_comparison, "report.json `comparison`"), (_inventory, "report.json `inventories`"),
    (_engine_behaviour, "report.json `findings` (severity engine)"), (_notes, "report.json `notes`"),
]


def render_summary(report: dict[str, Any]) -> str:
    parts = [render(report) for render, _ in SECTIONS]
    text = "\n".join(line for lines in parts for line in lines)
    droppable = [i for i in range(len(parts) - 1, 0, -1) if parts[i]]
    while len(text) > MAX_CHARS and droppable:
        index = droppable.pop(0)
        title = next((line.lstrip("# ") for line in parts[index] if line.startswith("#")), "a section")
        parts[index] = [f"({title}: does not fit the summary's {MAX_CHARS} characters; see {SECTIONS[index][1]})", ""]
        text = "\n".join(line for lines in parts for line in lines)
    return text[:MAX_CHARS - 1].rstrip("\n") + "\n"
