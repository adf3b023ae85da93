"""What each check could have detected on this run, and whether that is enough to say "verified".

A passing check proves something only when it could have failed: stressors on a route that serialises
requests never put two requests in one engine step, a distribution budget too small for --detect-tv
cannot see the shift it is meant to catch, a deselected family did not run at all. Tests record a
`coverage` measurement per candidate (FindingSink.cover); this module folds those records and the
test outcomes into ONE table (check, route, what ran, what it could detect, status, why) and names
the gaps that keep a run from "adopt".

Status of a (check, candidate) row:
- verified: ran, passed, and could have detected its bug class here;
- not verified: ran, but could not have detected it (the reason says why), or every test was skipped;
- not applicable: the engine itself says the bug class cannot exist here (e.g. it has no prefix cache);
- not supported by this route: the route refused a request feature the check needs (HTTP 400/422 or
  its adapter's documented refusal): listed, not verified, never a pass (a route that accepts a
  feature and ignores it fails instead);
- failed: a test failed (the findings say what);
- not run: deselected (-k, --categories, a test path) or never collected.
A family is covered when it is verified (or not applicable) on at least one candidate. A record may
name a `part` of its family (a request feature, a grid point that needs one): each part is its own
row and must be covered on its own (`features: n`, `distribution: T1.6-k20-m0.05`).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

# Every check family the route suite has (pytest.mark.check in equivalence/ and stressors/).
FAMILIES = ("greedy", "near-tie", "logprobs", "boundary", "streaming", "seeds", "distribution", "features", "chat",
            "agentic", "spec-path", "class-acceptance", "mixing", "batch-invariance", "accuracy", "task-accuracy",
            "aborts", "prefix-cache", "kv-pressure", "batch-ramp")
STRESSOR_FAMILIES = ("mixing", "batch-invariance", "accuracy", "task-accuracy", "aborts", "prefix-cache", "kv-pressure",
                     "batch-ramp")
VERIFIED, NOT_VERIFIED, NOT_APPLICABLE, NOT_SUPPORTED, FAILED, NOT_RUN = (
    "verified", "not verified", "not applicable", "not supported by this route", "failed", "not run")
ANY_ROUTE = "(all)"


@dataclass(frozen=True)
class CoverageRecord:
    """One test's statement of what it could detect on one route (a `coverage` measurement)."""

    check: str
    route: str
    verified: bool
    ran: Mapping[str, float] = field(default_factory=dict)   # counts that add up across tests: prompts, tokens...
    could_detect: str = ""
    reason: str = ""          # why not verified (or why not applicable, or the route's refusal)
    applicable: bool = True
    part: str = ""            # a part of the family with its own row (a request feature), "" for the family
    supported: bool = True    # False: the route refused the feature this part needs

    def as_measurement(self) -> dict[str, Any]:
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class CoverageRow:
    check: str
    route: str
    ran: str
    could_detect: str
    status: str
    why: str
    part: str = ""

    @property
    def covers(self) -> bool:
        return self.status in (VERIFIED, NOT_APPLICABLE)


def _ran_text(counts: Mapping[str, float], tests: int) -> str:
    parts = [f"{int(v) if float(v).is_integer() else round(v, 3)} {k}" for k, v in counts.items()]
    return ", ".join(parts) or f"{tests} test(s)"


def _unique(texts: Iterable[str]) -> str:
    seen: list[str] = []
    for text in texts:
        if text and text not in seen:
            seen.append(text)
    return "; ".join(seen)


def route_of_test(nodeid: str, candidates: Sequence[str]) -> str:
    """The candidate a test ran on, from its parameter id (`[candidate-math-00]`, `[T1.0-candidate]`)."""
    params = f"-{nodeid.partition('[')[2].rstrip(']')}-"
    matches = [c for c in candidates if f"-{c}-" in params]
    return max(matches, key=len) if matches else ANY_ROUTE


@dataclass(frozen=True)
class PlannedTest:
    """A route-suite test as collected, before -k or --deselect removed anything: the part it is one instance
    of is its function and its parameters other than the prompt and the route (a boundary variant, a grid
    point, a stream case); prompts and routes are instances of the same part."""

    check: str
    function: str
    qualifier: str = ""

    def part(self, multi_function: bool) -> str:
        """The part's name: its qualifier, prefixed by the function when its family has several."""
        base = self.function.removeprefix("test_") if multi_function else ""
        return " ".join(p for p in (base, self.qualifier) if p)


def declared_parts(planned: Mapping[str, Mapping[str, str]]) -> dict[str, tuple[str, str]]:
    """nodeid -> (family, part) for every planned test."""
    tests = {nodeid: PlannedTest(**entry) for nodeid, entry in planned.items()}
    functions: dict[str, set[str]] = defaultdict(set)
    for test in tests.values():
        functions[test.check].add(test.function)
    return {nodeid: (t.check, t.part(len(functions[t.check]) > 1)) for nodeid, t in tests.items()}


def coverage_rows(*, records: Iterable[Mapping[str, Any]], outcomes: Iterable[Any], candidates: Sequence[str],
                  planned: Mapping[str, Mapping[str, str]] | None = None) -> list[CoverageRow]:
    """The coverage table: one row per (family, part, candidate) planned or run, one "not run" row per family
    nothing of which was planned.

    A test's records name the parts it covers (a feature, a grid point, a rule); a test without records counts
    for the part it was planned as (`planned`, from collection); a planned test that did not run (deselected)
    leaves its part "not run", so -k cannot make a run read adopt by removing what would have failed."""
    outcomes = list(outcomes)
    declared = declared_parts(planned or {})
    by_key: dict[tuple[str, str, str], list[CoverageRecord]] = defaultdict(list)
    # a test may state several parts of its own family, and rows of another family (a check that finds another
    # family's evidence void: speculation off for its requests); those rows count no test outcome of their own
    parts_of_test: dict[Any, set[tuple[str, str, Any]]] = defaultdict(set)
    for raw in records:
        fields = {k: raw[k] for k in CoverageRecord.__dataclass_fields__ if k in raw}
        record = CoverageRecord(**fields)
        part = record.part or declared.get(raw.get("test_id"), ("", ""))[1]
        record = replace(record, part=part)
        by_key[(record.check, part, record.route)].append(record)
        parts_of_test[raw.get("test_id")].add((record.check, part, record.route))
    tests: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for outcome in outcomes:
        own = declared.get(outcome.nodeid, (outcome.check, ""))[1]
        stated = {(part, route) for check, part, route in parts_of_test.get(outcome.nodeid, ()) if check == outcome.check}
        for part, route in stated or {(own, None)}:
            tests[(outcome.check, part, route or route_of_test(outcome.nodeid, candidates))].append(outcome)
    ran = {o.nodeid for o in outcomes}
    missing: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for nodeid, (family, part) in declared.items():
        if nodeid not in ran:
            missing[(family, part, route_of_test(nodeid, candidates))].append(nodeid)
    rows: list[CoverageRow] = []
    for family in FAMILIES:
        keys = sorted({k for k in (*by_key, *tests, *missing) if k[0] == family},
                      key=lambda k: (k[1], k[2] == ANY_ROUTE, k[2]))
        if not keys:
            rows.append(CoverageRow(family, ANY_ROUTE, "-", "-", NOT_RUN,
                                    "deselected (-k, a test path or --categories) or not collected"))
            continue
        for key in keys:
            row = _row_status(family, key[2], by_key.get(key, []), tests.get(key, []), missing.get(key, []))
            rows.append(replace(row, part=key[1]))
    return rows


def _evidence(counts: Mapping[str, float]) -> bool:
    return any(v > 0 for v in counts.values())


def _row_status(family: str, route: str, records: list[CoverageRecord], outcomes: list[Any],
                missing: list[str] = ()) -> CoverageRow:
    counts: dict[str, float] = {}
    for record in records:
        for name, value in record.ran.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):   # counts add up; nothing else does
                counts[name] = counts.get(name, 0) + value
    ran = _ran_text(counts, len(outcomes) or len(records))
    if outcomes and counts:
        ran += f" in {len(outcomes)} test(s)"
    could = _unique(r.could_detect for r in records) or "-"
    row = lambda status, why: CoverageRow(family, route, ran, could, status, why)  # noqa: E731
    results = [o.outcome for o in outcomes]
    if any(r in ("failed", "error") for r in results):
        return row(FAILED, "a test failed: see the findings")
    if not outcomes and missing:
        return CoverageRow(family, route, "-", could, NOT_RUN,
                           f"{len(missing)} planned test(s) deselected (-k or --deselect), e.g. {missing[0]}")
    refused = [r for r in records if not r.supported]
    if refused:
        return row(NOT_SUPPORTED, _unique(r.reason for r in refused))
    passed = sum(r in ("passed", "xfailed") for r in results)
    if records and not all(r.applicable for r in records):   # the check said so, whether its test passed or skipped
        return row(NOT_APPLICABLE, _unique(r.reason for r in records if not r.applicable))
    if outcomes and not passed:
        return row(NOT_VERIFIED, _unique(o.reason for o in outcomes if o.outcome == "skipped")
                   or "every test was skipped")
    blind = [r for r in records if not r.verified]
    if blind:
        return row(NOT_VERIFIED, _unique(r.reason for r in blind))
    if not records:
        return row(NOT_VERIFIED, f"{passed} test(s) passed but recorded no evidence of what they compared")
    if not _evidence(counts):
        return row(NOT_VERIFIED, "vacuous: the test(s) passed with nothing compared ("
                   + (", ".join(f"0 {k}" for k in counts) or "no counts recorded") + ")")
    if missing:
        return row(NOT_VERIFIED, f"only {len(outcomes)} of {len(outcomes) + len(missing)} planned test(s) ran "
                                 f"(-k or --deselect removed the rest, e.g. {missing[0]})")
    skipped = _unique(o.reason for o in outcomes if o.outcome == "skipped")
    return row(VERIFIED, f"{passed} test(s) passed" + (f" ({skipped})" if skipped else ""))


class Gap(str):
    """One gap as the verdict line names it (the text), plus what the summary groups it by: its kind (a coverage
    status, or "settings", "prompt set"...), its subject (a family or part) and its reason without route names."""

    kind: str
    subject: str
    why: str

    def __new__(cls, text: str, *, kind: str, subject: str = "", why: str = "") -> "Gap":
        gap = super().__new__(cls, text)
        gap.kind, gap.subject, gap.why = kind, subject, why
        return gap

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "subject": self.subject, "why": self.why, "text": str(self)}


def coverage_gaps(rows: Sequence[CoverageRow], route: str | None = None) -> list[Gap]:
    """Parts covered on no candidate (or, given `route`, not on that candidate), each with its reason: what
    keeps the run (or that route) from "adopt". Families nothing of which ran lead the list as "not run"."""
    gaps, absent, deselected = [], [], []
    for family in FAMILIES:
        ours = [r for r in rows if r.check == family and (route is None or r.route in (route, ANY_ROUTE))]
        for part in sorted({r.part for r in ours}) or [""]:
            mine = [r for r in ours if r.part == part]
            if any(r.covers for r in mine) or any(r.status == FAILED for r in mine):
                continue
            if not mine or all(r.status == NOT_RUN for r in mine):
                if not part and family not in absent:
                    absent.append(family)
                elif part:
                    deselected.append(_name(family, part))
                continue
            why = _unique(f"{r.route}: {r.why}" if r.route != ANY_ROUTE else r.why for r in mine)
            status = mine[0].status if len({r.status for r in mine}) == 1 else "not verified"
            gaps.append(Gap(f"{_name(family, part)} {status} ({why})", kind=status, subject=_name(family, part),
                            why=_unique(r.why for r in mine)))
    if deselected:
        gaps.insert(0, Gap(f"not run: {', '.join(deselected)} (planned, deselected by -k or --deselect)",
                           kind=NOT_RUN, subject=", ".join(deselected), why="planned, deselected by -k or --deselect"))
    if absent:
        gaps.insert(0, Gap(f"not run: {', '.join(absent)} (deselected by -k, a test path or --categories)",
                           kind=NOT_RUN, subject=", ".join(absent), why="deselected by -k, a test path or --categories"))
    return gaps


def table_dicts(rows: Sequence[CoverageRow]) -> list[dict[str, str]]:
    return [asdict(r) for r in rows]


COLUMNS = ("check", "route", "what ran", "what it could detect", "verified", "why")


def table_cells(row: Mapping[str, str]) -> tuple[str, ...]:
    """One coverage row as the renderers show it: verified is yes / no / n/a / not supported by this route /
    failed / not run; a part is shown after its family (`features: n`)."""
    verified = {VERIFIED: "yes", NOT_VERIFIED: "no", NOT_APPLICABLE: "n/a"}.get(row["status"], row["status"])
    return (_name(row["check"], row.get("part", "")), row["route"], row["ran"], row["could_detect"], verified,
            row["why"])


def _name(family: str, part: str) -> str:
    return f"{family}: {part}" if part else family
