"""The motivating report's own protocol as a named check: the same 100 chat requests sent one at a time, at
concurrency 8 on the candidate, and at concurrency 8 on the AR baseline under the same load; each wrong answer is
attributed to the request whose context it answered.

Why: "7 wrong answers of 100 at concurrency 8, 0 of 100 serially, 0 of 304 with speculation off" (sglang#36548,
Qwen3.8-27B with DFlash 2 on SGLang) is how the bug reached its maintainers; a user deciding about such a route
compares this check's sentence with theirs, number for number. The accuracy stressor (accuracy_load.py) judges the
whole canary pool at every load level; this one fixes the report's shape: 100 conversations, all chat requests (the
server's template builds them), every one asking for a fact only its own context holds, so a wrong answer in
another conversation's context names its source. It reuses the accuracy stressor's tallies, attribution and load
control; only the workload and the sentence are its own. Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass

from spec_route_suite.stressors.accuracy import Tally, tally
from spec_route_suite.stressors.accuracy_load import AccuracyUnderLoad

REQUESTS = 100
CONCURRENCY = 8
PART = f"reported protocol: {REQUESTS} chats at c={CONCURRENCY}"


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

    def sentence(self) -> str:
        """"x wrong of n at concurrency 8 (...attributed), y wrong of n serially, z wrong of n on the AR baseline"."""
        loaded = self.loaded[0]
        sources = sorted({f.attribution.source_key for f in self.flipped if f.attribution.attributed})
        answered = (f"; {len(self.flipped)} right alone, of which "
                    f"{sum(f.attribution.attributed for f in self.flipped)} answered in another request's context"
                    + (f" ({', '.join(sources[:5])})" if sources else "") if self.flipped else "")
        parts = [f"{loaded.wrong} wrong of {loaded.n} at concurrency {CONCURRENCY}{answered}",
                 f"{self.serial.wrong} wrong of {self.serial.n} serially"]
        theirs = self.baseline_under_load()
        parts.append(f"{theirs.wrong} wrong of {theirs.n} on the AR baseline under the same load" if theirs is not None
                     else "the AR baseline serialises requests (no same-load control)")
        return ", ".join(parts)

    def summary_line(self, findings, comparison) -> tuple[str, dict]:
        """The coverage row of this part and the report-shaped sentence, as an info finding."""
        text = f"{self.sentence()}; {comparison.control_text()}"
        self.witness.cover(findings, self.check, part=PART,
                           could_detect=f"the reported symptom: an answer right alone given in another request's "
                                        f"context at c={CONCURRENCY} ({comparison.control_text()})")
        details = {"sentence": text, "requests": len(self.workload.items), "concurrency": CONCURRENCY,
                   "wrong_at_load": list(self.loaded[0].wrong_keys), "wrong_serially": list(self.serial.wrong_keys),
                   "attributions": [f.line() for f in self.flipped[:30]], "load_control": comparison.as_details()}
        self.info(findings, f"{PART}: {text}", details)
        return text, details
