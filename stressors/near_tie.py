"""One near-tie policy for the stressors, the same as the greedy check's (--greedy-policy, tau).

A greedy output under load that differs from the same request alone is a bug under `strict`.
Under `classify` it is excused as a numerical near-tie only when the candidate's token, teacher-
forced through the baseline at the first divergence, is within tau of the baseline's top-1 —
tau from the run's A/A calibration or --near-tie-tau, never a constant of the stressor's own.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass

from spec_route_suite.stressors.mixing.detect import classify_mismatch


@dataclass(frozen=True)
class NearTiePolicy:
    mode: str          # "strict" | "classify"
    calibration: object  # has get() -> Calibration (tau)

    @property
    def tau(self) -> float:
        return self.calibration.get().tau

    def judge(self, *, baseline, tokenizer, prompt_ids, expected, got, max_tokens: int) -> tuple[str, str]:
        """("near-tie" | "bug", why) for one greedy mismatch."""
        tau = self.tau
        severity, why = classify_mismatch(baseline=baseline, tokenizer=tokenizer, prompt_ids=prompt_ids,
                                          expected=expected, got=got, max_tokens=max_tokens, tau=tau)
        if self.mode == "strict" and severity == "near-tie":
            return "bug", f"{why} [strict policy: a near-tie (tau {tau:.2g}) fails too; --greedy-policy classify excuses it]"
        return severity, f"{why} [{self.mode} policy, tau {tau:.2g}]"
