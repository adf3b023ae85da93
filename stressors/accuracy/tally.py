"""Task accuracy under load: the user-visible form of cross-request bugs, with its statistics.

Why: "7 wrong of 100 at concurrency 8, 0 of 100 serially, 0 of 304 with speculation off"
is how the motivating bug was reported, and it is the sentence a maintainer compares with
their own numbers. Each checkable prompt is scored serially, at each load level and on
the baseline; Fisher's exact test says how surprising the load count is against the
serial count. The verdict itself does not wait for significance: in greedy mode an
answer that is right alone and wrong under load is a bug (a flip), and every flip is
listed with its attribution. Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from scipy.stats import binomtest, fisher_exact

from spec_route_suite.routes.base import Completion
from spec_route_suite.stressors.canary import Workload, answer_correct
from spec_route_suite.stressors.driver import Outcome
from spec_route_suite.stressors.mixing.detect import Attribution, attribute, reliable_canaries


@dataclass(frozen=True)
class Tally:
    """Wrong answers among n scored outputs, under one condition (serial, c=8, baseline...)."""

    label: str
    wrong: int
    n: int
    wrong_keys: tuple[str, ...] = ()

    @property
    def rate(self) -> float:
        return self.wrong / self.n if self.n else 0.0

    def phrase(self) -> str:
        return f"{self.wrong} wrong of {self.n} {self.label}"


@dataclass(frozen=True)
class Flip:
    """An answer right when sent alone and wrong under load."""

    request_id: str
    key: str
    expected: str
    serial_text: str
    load_text: str
    attribution: Attribution

    def line(self) -> str:
        source = (f"; looks like {self.attribution.source_key} ({self.attribution.evidence})"
                  if self.attribution.attributed else "")
        return (f"{self.request_id}: expected {self.expected!r}; alone {self.serial_text[:60]!r}, "
                f"under load {self.load_text[:60]!r}{source}")


def tally(label: str, workload: Workload, outputs: Iterable[tuple[str, str]]) -> Tally:
    """Score (key, output text) pairs against each item's checkable answer (user prompts are not scored here)."""
    wrong, n = [], 0
    for key, text in outputs:
        if not workload.get(key).checkable:
            continue
        n += 1
        if not answer_correct(workload.get(key), text):
            wrong.append(key)
    return Tally(label=label, wrong=len(wrong), n=n, wrong_keys=tuple(wrong))


def fisher_p(load: Tally, serial: Tally) -> float:
    """One-sided Fisher exact p-value: are there more wrong answers under load than serially?"""
    table = [[load.wrong, load.n - load.wrong], [serial.wrong, serial.n - serial.wrong]]
    return float(fisher_exact(table, alternative="greater").pvalue)


@dataclass(frozen=True)
class Paired:
    """Two routes' answers to the same requests, request by request: the keys only the first answered wrong and the
    keys only the second did (answers both got wrong, or both right, cannot say which route is less accurate)."""

    only_first: tuple[str, ...]
    only_second: tuple[str, ...]

    @property
    def p_value(self) -> float:
        """One-sided exact paired test (McNemar's, exact: a sign test over the requests one route alone answered
        wrong): does the first answer wrong alone more often than the second?"""
        first, n = len(self.only_first), len(self.only_first) + len(self.only_second)
        return float(binomtest(first, n, 0.5, alternative="greater").pvalue) if n else 1.0

    def phrase(self, first: str, second: str) -> str:
        return (f"{len(self.only_first)} wrong only on {first}, {len(self.only_second)} only on {second} "
                f"(exact paired test p={self.p_value:.2g})")


def paired(first: Tally, second: Tally) -> Paired:
    """The two tallies of the same scored requests, request by request (a tally of other requests cannot pair)."""
    if first.n != second.n:
        raise ValueError(f"paired tallies score the same requests: {first.phrase()} vs {second.phrase()}")
    theirs, mine = set(second.wrong_keys), set(first.wrong_keys)
    return Paired(tuple(k for k in first.wrong_keys if k not in theirs),
                  tuple(k for k in second.wrong_keys if k not in mine))


def sentence(*, loaded: Iterable[Tally], serial: Tally, baseline: Tally | None) -> str:
    """"x wrong of n at c=8, y wrong of n serial, z wrong of n on the baseline" with Fisher's p per level."""
    parts = [f"{t.phrase()} (Fisher p={fisher_p(t, serial):.3g} vs serial)" for t in loaded]
    parts.append(serial.phrase())
    if baseline is not None:
        parts.append(baseline.phrase())
    return ", ".join(parts)


def flips(*, workload: Workload, serial: Mapping[str, Completion], outcomes: Iterable[Outcome],
          references: Mapping[str, Completion]) -> list[Flip]:
    """Outputs wrong under load whose serial answer was right, each attributed like a mixing mismatch."""
    outcomes = list(outcomes)
    found = []
    canaries = reliable_canaries(workload, references)
    for outcome in outcomes:
        if not outcome.ok or outcome.key not in serial:
            continue
        item = workload.get(outcome.key)
        if not item.checkable or not answer_correct(item, serial[outcome.key].text) or answer_correct(item, outcome.completion.text):
            continue
        window = [o for o in outcomes if o.overlaps(outcome)]
        found.append(Flip(request_id=outcome.request_id, key=outcome.key, expected=item.answer,
                          serial_text=serial[outcome.key].text, load_text=outcome.completion.text,
                          attribution=attribute(victim_request=outcome.request_id, victim_key=outcome.key,
                                                output=outcome.completion, workload=workload,
                                                references=references, window=window, canaries=canaries)))
    return found
