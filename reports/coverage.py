"""What each check could have detected on this run, and whether that is enough to say "verified".

A passing check proves something only when it could have failed: stressors on a route that serialises
requests never put two requests in one engine step, a distribution budget too small for --detect-tv
cannot see the shift it is meant to catch, a deselected family did not run at all. Tests record a
`coverage` measurement per candidate (FindingSink.cover); this module folds those records and the
test outcomes into ONE table (check, route, what ran, what it could detect, status, why) and names
the gaps that keep a run from "adopt".

A row (check, part, candidate) is made of instances: every test planned for it or run in it (one per prompt,
per route parameter, per detector that shares the part's name: the greedy and the sampled `n` tests are two
instances of `features: n`). Each instance is judged on its own records and outcome, and the row says "k of n
instances verified"; one passing instance never verifies a part whose other instances skipped or were
deselected. Status of a row:
- verified: every instance ran, passed, could have detected its bug class here and compared something
  (instances the engine rules out, "not applicable", are counted apart);
- not verified: an instance could not have detected it (the reason says why), was skipped, compared
  nothing, recorded no evidence, or was planned and deselected while others ran;
- not applicable: every instance says the engine itself rules the bug class out (e.g. it has no prefix cache);
- not supported by this route: an instance's route refused a request feature the check needs (HTTP 400/422
  or its adapter's documented refusal): listed, not verified, never a pass (a route that accepts a feature
  and ignores it fails instead);
- failed: an instance failed (the findings say what);
- not run: every instance was deselected (-k, --categories, a test path), or the family was never collected.
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
            "agentic", "spec-path", "class-acceptance", "draft-history", "turn-reuse", "mixing", "batch-invariance",
            "accuracy", "task-accuracy", "aborts", "prefix-cache", "kv-pressure", "batch-ramp")
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
    instances: int = 0            # tests planned or run for this row (prompts, route parameters, detectors)
    verified_instances: int = 0   # of which ran, passed and compared something
    na_instances: int = 0         # of which the engine itself rules the bug class out

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

    A row is made of instances: every test planned for it or run in it (a prompt, a route's parameter, a second
    detector sharing the part's name), each judged on its own evidence (`judge_instance`). A test's records
    name the parts it covers (a feature, a grid point, a rule); a test without records counts for the part it was
    planned as (`planned`, from collection); a planned test that did not run (deselected) is an instance "not
    run", so -k cannot make a run read adopt by removing what would have failed."""
    outcomes = list(outcomes)
    declared = declared_parts(planned or {})
    records_of: dict[tuple[str, str, str], dict[Any, list[CoverageRecord]]] = defaultdict(lambda: defaultdict(list))
    # a test may state several parts of its own family, and rows of another family (a check that finds another
    # family's evidence void: speculation off for its requests); those rows count no test outcome of their own
    parts_of_test: dict[Any, set[tuple[str, str, Any]]] = defaultdict(set)
    for raw in records:
        fields = {k: raw[k] for k in CoverageRecord.__dataclass_fields__ if k in raw}
        record = CoverageRecord(**fields)
        part = record.part or declared.get(raw.get("test_id"), ("", ""))[1]
        record = replace(record, part=part)
        records_of[(record.check, part, record.route)][raw.get("test_id")].append(record)
        parts_of_test[raw.get("test_id")].add((record.check, part, record.route))
    outcome_of: dict[tuple[str, str, str], dict[Any, Any]] = defaultdict(dict)
    for outcome in outcomes:
        own = declared.get(outcome.nodeid, (outcome.check, ""))[1]
        stated = {(part, route) for check, part, route in parts_of_test.get(outcome.nodeid, ()) if check == outcome.check}
        for part, route in stated or {(own, None)}:
            outcome_of[(outcome.check, part, route or route_of_test(outcome.nodeid, candidates))][outcome.nodeid] = outcome
    ran = {o.nodeid for o in outcomes}
    missing: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for nodeid, (family, part) in declared.items():
        if nodeid not in ran:
            missing[(family, part, route_of_test(nodeid, candidates))].append(nodeid)
    rows: list[CoverageRow] = []
    for family in FAMILIES:
        keys = sorted({k for k in (*records_of, *outcome_of, *missing) if k[0] == family},
                      key=lambda k: (k[1], k[2] == ANY_ROUTE, k[2]))
        if not keys:
            rows.append(CoverageRow(family, ANY_ROUTE, "-", "-", NOT_RUN,
                                    "deselected (-k, a test path or --categories) or not collected"))
            continue
        for key in keys:
            mine, run_here = records_of.get(key, {}), outcome_of.get(key, {})
            tests = list(dict.fromkeys([*run_here, *mine, *missing.get(key, [])]))
            instances = [judge_instance(test, mine.get(test, []), run_here.get(test), planned_only=test not in run_here
                                        and test in missing.get(key, ())) for test in tests]
            row = fold_row(family, key[2], instances, [r for rs in mine.values() for r in rs], len(run_here))
            rows.append(replace(row, part=key[1]))
    return rows


def _evidence(counts: Mapping[str, float]) -> bool:
    return any(v > 0 for v in counts.values())


def _counts(records: Iterable[CoverageRecord]) -> dict[str, float]:
    counts: dict[str, float] = {}
    for record in records:
        for name, value in record.ran.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):   # counts add up; nothing else does
                counts[name] = counts.get(name, 0) + value
    return counts


@dataclass(frozen=True)
class Instance:
    """One test's say on one row: a prompt, a route parameter, or one of several detectors sharing a part's name.
    Its status is a row status; `why` says what it lacked (the same text for instances that lacked the same)."""

    test: str
    status: str
    why: str = ""


def judge_instance(test: Any, records: Sequence[CoverageRecord], outcome: Any, *, planned_only: bool) -> Instance:
    """What one planned or run test proved for one row: verified only when it ran, passed, could detect its bug
    class (no record says otherwise) and compared something (a count above 0)."""
    name = str(test)
    if outcome is not None and outcome.outcome in ("failed", "error"):
        return Instance(name, FAILED, "a test failed: see the findings")
    if outcome is None and planned_only:
        return Instance(name, NOT_RUN, "planned, deselected by -k or --deselect")
    refused = [r for r in records if not r.supported]
    if refused:
        return Instance(name, NOT_SUPPORTED, _unique(r.reason for r in refused))
    if any(not r.applicable for r in records):   # the check said so, whether its test passed or skipped
        return Instance(name, NOT_APPLICABLE, _unique(r.reason for r in records if not r.applicable))
    if outcome is not None and outcome.outcome not in ("passed", "xfailed"):
        reason = (outcome.reason or "").removeprefix("not verified: ")
        return Instance(name, NOT_VERIFIED, f"{outcome.outcome}" + (f": {reason}" if reason else ""))
    blind = [r for r in records if not r.verified]
    if blind:
        return Instance(name, NOT_VERIFIED, _unique(r.reason for r in blind) or "its check says it could not detect "
                                                                                "its bug class here")
    if not records:
        return Instance(name, NOT_VERIFIED, "test(s) passed but recorded no evidence of what they compared")
    counts = _counts(records)
    if not _evidence(counts):
        return Instance(name, NOT_VERIFIED, "vacuous: the test(s) passed with nothing compared ("
                        + (", ".join(f"0 {k}" for k in counts) or "no counts recorded") + ")")
    return Instance(name, VERIFIED)


def instances_text(total: int, verified: int, na: int = 0) -> str:
    """"k of n instances verified": instances the engine rules out (n/a) are counted apart."""
    if total and na == total:
        return f"{na} of {na} instances not applicable"
    return f"{verified} of {total - na} instances verified" + (f", {na} not applicable" if na else "")


def _open_reasons(instances: Sequence[Instance]) -> str:
    """The reasons of the instances that did not verify, each once, with how many share it when several do."""
    groups: dict[tuple[str, str], list[str]] = {}
    for instance in instances:
        if instance.status not in (VERIFIED, NOT_APPLICABLE):
            groups.setdefault((instance.status, instance.why), []).append(instance.test)
    parts = []
    for (status, why), tests in groups.items():
        text = f"not run ({why}, e.g. {tests[0]})" if status == NOT_RUN else why
        parts.append(text + (f" (x{len(tests)})" if len(tests) > 1 else ""))
    return "; ".join(parts)


def fold_row(family: str, route: str, instances: Sequence[Instance], records: Sequence[CoverageRecord],
             outcomes: int) -> CoverageRow:
    """A row from its instances: verified only when every instance is verified (or not applicable, the rest
    verified); failed when one failed; not run when none ran; else not verified (or not supported), every
    instance that did not verify named with its reason."""
    counts = _counts(records)
    ran = _ran_text(counts, outcomes or len(records))
    if outcomes and counts:
        ran += f" in {outcomes} test(s)"
    could = _unique(r.could_detect for r in records) or "-"
    statuses = {i.status for i in instances}
    verified = sum(i.status == VERIFIED for i in instances)
    na = sum(i.status == NOT_APPLICABLE for i in instances)
    text = instances_text(len(instances), verified, na)
    row = lambda status, why: CoverageRow(family, route, ran, could, status, why, instances=len(instances),  # noqa: E731
                                          verified_instances=verified, na_instances=na)
    if FAILED in statuses:
        return row(FAILED, f"a test failed: see the findings — {text}")
    if statuses == {NOT_RUN}:
        return replace(row(NOT_RUN, f"{len(instances)} planned test(s) deselected (-k or --deselect), e.g. "
                                    f"{instances[0].test}"), ran="-")
    if NOT_SUPPORTED in statuses:
        return row(NOT_SUPPORTED, _unique(i.why for i in instances if i.status == NOT_SUPPORTED) + f" — {text}")
    if statuses == {NOT_APPLICABLE}:
        return row(NOT_APPLICABLE, _unique(i.why for i in instances))
    if statuses <= {VERIFIED, NOT_APPLICABLE}:
        excused = _unique(i.why for i in instances if i.status == NOT_APPLICABLE)
        return row(VERIFIED, text + (f" (not applicable: {excused})" if excused else ""))
    return row(NOT_VERIFIED, f"{_open_reasons(instances)} — {text}")


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


def table_dicts(rows: Sequence[CoverageRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


COLUMNS = ("check", "route", "instances", "what ran", "what it could detect", "verified", "why")


def table_cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    """One coverage row as the renderers show it: verified is yes / no / n/a / not supported by this route /
    failed / not run; instances is "k of n instances verified"; a part is shown after its family (`features: n`)."""
    verified = {VERIFIED: "yes", NOT_VERIFIED: "no", NOT_APPLICABLE: "n/a"}.get(row["status"], row["status"])
    instances = (instances_text(row["instances"], row.get("verified_instances", 0), row.get("na_instances", 0))
                 if row.get("instances") else "-")
    return (_name(row["check"], row.get("part", "")), row["route"], instances, row["ran"], row["could_detect"],
            verified, row["why"])


def _name(family: str, part: str) -> str:
    return f"{family}: {part}" if part else family
