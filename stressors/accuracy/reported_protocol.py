"""The motivating report's own protocol as a named check: the same 100 chat requests sent one at a time, at
concurrency 8 on the candidate, and at concurrency 8 on the AR baseline under the same load; each wrong answer is
attributed to the request whose context it answered.

Why: "7 wrong answers of 100 at concurrency 8, 0 of 100 serially, 0 of 304 with speculation off" (sglang#36548,
Qwen3.8-27B with DFlash 2 on SGLang) is how the bug reached its maintainers; a user deciding about such a route
compares this check's sentence with theirs, number for number. The accuracy stressor (stressors/accuracy/load.py)
judges the whole canary pool at every load level; this one fixes the report's shape: 100 conversations, all chat
requests (the server's template builds them), every one asking for a fact only its own context holds, so a wrong
answer in another conversation's context names its source. It reuses the accuracy stressor's tallies, attribution and
load control. It judges two kinds of wrong answer apart, and its sentence reports them apart:
- flips, answers right alone and wrong at c=8, charged by their excess over the AR server's under the same load
  (stressors/control.py). Its looks spend most of alpha at the first, so the report's own evidence, 7 of 100
  flipped against 0 of 100, is charged from the first 100 requests at alpha 0.01 (p = 0.0070);
- static errors, answers wrong alone, against the AR server's answers alone to the same requests by an exact paired
  test at the run's alpha: a route wrong at every load is a bug, not a pass because nothing turned wrong.
Flips come only from answers right alone: with fewer than MIN_RIGHT_ALONE of them the part reads "not verified:
weakly". Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass

from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import parity_repro
from spec_route_suite.stressors.accuracy.tally import Paired, Tally, paired, tally
from spec_route_suite.stressors.accuracy.load import AccuracyUnderLoad

REQUESTS = 100
CONCURRENCY = 8
PART = f"reported protocol: {REQUESTS} chats at c={CONCURRENCY}"
# Flips come only from answers right alone. A route that flips the report's share of them (7%) against an AR server
# that flips none is charged (bought rounds included) in 100% of runs when all 100 are right alone, 82% when 50 are,
# 56% when 40 are and 22% when 30 are (benchmarks/protocol_power.py): 50 is where it passes 4 runs in 5. Below it a
# pass says little, and the part reads "not verified: weakly".
MIN_RIGHT_ALONE = 50
STATIC_REPRO = 5   # requests wrong only on the candidate resent by a static-error repro


def protocol_workload(build, *, seed: int):
    """REQUESTS conversations, every one a chat whose last user message asks for a fact only it states."""
    return build(size=REQUESTS, seed=seed, task_share=0.0, chat_share=1.0)


@dataclass
class ReportedProtocol(AccuracyUnderLoad):
    """The report's three counts: wrong at c=8 on the candidate, serially, and at c=8 on the AR baseline."""

    def run(self, findings, *, seed: int) -> None:
        self.tally_serial()
        self.send((CONCURRENCY,), findings, seed=seed)

    def baseline_under_load(self) -> Tally | None:
        """The AR baseline's wrong answers under the same load (None when it serialises requests)."""
        if not self.control.available:
            return None
        return tally(f"on the AR baseline at c={CONCURRENCY}", self.workload,
                     ((o.key, o.completion.text) for run in self.control.runs for o in run.completed))

    @property
    def right_alone(self) -> int:
        return self.serial.n - self.serial.wrong

    def static_errors(self) -> Paired:
        """The candidate's answers wrong alone beside the AR server's answers alone to the same requests."""
        return paired(self.serial, self.on_baseline)

    def weakly(self) -> str:
        """Why a pass says little here: too few answers right alone to flip ("" when there are enough)."""
        if self.right_alone >= MIN_RIGHT_ALONE:
            return ""
        return (f"weakly: only {self.right_alone} of {self.serial.n} answers right alone, fewer than "
                f"{MIN_RIGHT_ALONE}: flips come only from them, and a route flipping the report's 7% of them is "
                f"charged in fewer than 4 runs of 5 (benchmarks/protocol_power.py)")

    def sentence(self) -> str:
        """The report's three counts ("x wrong of n at concurrency 8, y wrong of n serially, z wrong of n on the AR
        baseline"), then the flips and the static errors apart."""
        loaded, serial, alone = self.loaded[0], self.serial, self.on_baseline
        theirs = self.baseline_under_load()
        counts = [f"{loaded.wrong} wrong of {loaded.n} at concurrency {CONCURRENCY}",
                  f"{serial.wrong} wrong of {serial.n} serially",
                  f"{theirs.wrong} wrong of {theirs.n} on the AR baseline under the same load" if theirs is not None
                  else "the AR baseline serialises requests (no same-load control)"]
        sources = sorted({f.attribution.source_key for f in self.flipped if f.attribution.attributed})
        attributed = (f", {sum(f.attribution.attributed for f in self.flipped)} answered in another request's "
                      f"context" + (f" ({', '.join(sources[:5])})" if sources else "") if self.flipped else "")
        flips = (f"flips (right alone, wrong at c={CONCURRENCY}): {len(self.flipped)} of {self.right_alone} right "
                 f"alone{attributed}")
        static = (f"static errors (wrong alone): {serial.wrong} of {serial.n}, the AR server {alone.wrong} of "
                  f"{alone.n} alone; {self.static_errors().phrase('the candidate', 'the AR server')}")
        return f"{', '.join(counts)}; {flips}; {static}"

    def summary_line(self, findings, comparison) -> tuple[str, dict]:
        """The coverage row of this part ("not verified: weakly" with too few answers right alone) and the
        report-shaped sentence, as an info finding."""
        text = f"{self.sentence()}; {comparison.control_text()}"
        self.witness.cover(findings, self.check, part=PART, weakly=self.weakly(),
                           could_detect=f"the reported symptom: an answer right alone given in another request's "
                                        f"context at c={CONCURRENCY} ({comparison.control_text()}), and answers "
                                        f"wrong alone where the AR server's are right")
        static = self.static_errors()
        details = {"sentence": text, "requests": len(self.workload.items), "concurrency": CONCURRENCY,
                   "wrong_at_load": list(self.loaded[0].wrong_keys), "wrong_serially": list(self.serial.wrong_keys),
                   "right_alone": self.right_alone, "attributions": [f.line() for f in self.flipped[:30]],
                   "static_errors": {"wrong_only_on_candidate": list(static.only_first),
                                     "wrong_only_on_baseline": list(static.only_second), "p_value": static.p_value,
                                     "alpha": self.control.alpha},
                   "load_control": comparison.as_details()}
        self.info(findings, f"{PART}: {text}", details)
        return text, details

    def judge(self, findings, comparison, text: str, details: dict) -> str | None:
        """The static errors and the flips, each charged on its own; the failure message, or None."""
        failures = (self.judge_static(findings, text, details), super().judge(findings, comparison, text, details))
        return "\n".join(f for f in failures if f) or None

    def judge_static(self, findings, text: str, details: dict) -> str | None:
        """Answers wrong alone where the AR server's answers alone are right, more often than the other way round by
        the exact paired test at the run's alpha: a bug finding (the route is wrong at every load, flips or not)."""
        static, alpha = self.static_errors(), self.control.alpha
        if static.p_value >= alpha:
            return None
        keys = static.only_first[:STATIC_REPRO]
        baseline = self.pair.baseline
        title = (f"{len(static.only_first)} of {self.serial.n} answers wrong when sent alone where the AR server's "
                 f"answers alone are right ({static.phrase('the candidate', 'the AR server')}, alpha {alpha:g}): "
                 f"static errors at every load: {text}")
        findings.add(Finding(check=self.check, severity="bug", route=self.candidate.name, prompt_id=keys[0],
                             title=title, details={**details, "repro": parity_repro(
                                 [self.request(k) for k in keys], candidate=self.candidate, baseline=baseline,
                                 fields=("text",), expected=[baseline.generate(self.request(k)) for k in keys],
                                 actual=[self.references[k] for k in keys])}))
        return f"candidate '{self.candidate.name}': {title}"
