"""Does speculation run for every kind of request, or only for plain ones?

Why: vLLM (to about v0.13) turned speculation off for requests with logprobs or penalties (vllm#34497), and
llama.cpp speculated only on the first chat request (llama.cpp#19231). Answers stay correct, so every parity
check passes for those features without ever exercising the speculative path: the route is "verified" where
it was never tested. Where the engine states drafting per answer (llama.cpp `timings.draft_n`, SGLang
`meta_info`, the in-process engines), each request family's answers say whether they were drafted for.

REQUESTS answers of a family and as many plain ones: the share of each that speculated (drafted tokens > 0, from
each answer's own counters) is compared by Fisher's exact test, one-sided (the family speculates less), at the
run's alpha. A family speculating on its first request only (1 of 10) is caught as surely as one that never does
(0 of 10); an engine whose plain answers speculate only sometimes (an n-gram drafter finding no match) is not
charged for a family that does the same. The family claims to see a family share down to DETECT_RATIO of the plain
share with power 0.9; when the plain share is too low, or too few answers stated their drafting, to see that, the
row is "not verified" and says the share it could see. A family found off makes the parity rows of the checks that
judge that feature "not verified on the speculative path". A route that states nothing per answer (vLLM:
server-wide /metrics counters only) cannot be judged this way: not verified.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Callable, Sequence

from spec_route_suite.routes.base import Completion, Request, ResponseFormat
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import spec_path_repro

MAX_TOKENS = 24   # several draft blocks: a speculating engine drafts on every one of them
PART = "on the speculative path"
REQUESTS = 10     # per family, and as many plain: 1 of 10 against 10 of 10 is Fisher p = 6e-5
DETECT_RATIO = 0.25   # claimed: a family speculating on a quarter of the plain share or less, power 0.9
POWER = 0.9


@dataclass(frozen=True)
class Family:
    """A kind of request, how to make one from a plain greedy request, and the parity rows that rely on it."""

    name: str
    make: Callable[[Request], Request]
    capability: str = ""                       # the route capability it needs ("" none)
    parity: tuple[tuple[str, str], ...] = ()   # (check family, part) whose verdict assumes speculation ran


FAMILIES = (
    Family("logprobs", lambda r: replace(r, logprobs=2), "logprobs", (("logprobs", PART),)),
    Family("penalties", lambda r: replace(r, repetition_penalty=1.2), "",
           (("features", f"penalties {PART}"),)),
    Family("chat", lambda r: r, "chat", (("chat", PART),)),   # built from a chat record by the test
    Family("n", lambda r: replace(r, n=2), "n", (("features", f"n {PART}"),)),
    Family("json", lambda r: replace(r, response_format=ResponseFormat("json_object")), "",
           (("features", f"response_format {PART}"),)),
)
BY_NAME = {f.name: f for f in FAMILIES}


@dataclass(frozen=True)
class Share:
    """How many answers of one family stated their drafting, and how many of those were drafted for."""

    answers: int
    stated: int
    speculated: int

    @classmethod
    def of(cls, completions: Sequence[Completion]) -> "Share":
        stated = [c for c in completions if c.draft_tokens is not None]
        return cls(len(completions), len(stated), sum(1 for c in stated if c.draft_tokens > 0))

    @property
    def rate(self) -> float | None:
        return None if not self.stated else self.speculated / self.stated

    def phrase(self) -> str:
        if not self.stated:
            return f"{self.answers} answer(s), none stating its drafting"
        return f"{self.speculated} of {self.stated} answers speculated"


def drop_pvalue(family: Share, plain: Share) -> float | None:
    """One-sided Fisher exact p-value that the family's share of speculating answers is below the plain one's."""
    if not family.stated or not plain.stated:
        return None
    from scipy.stats import fisher_exact
    table = [[family.speculated, family.stated - family.speculated],
             [plain.speculated, plain.stated - plain.speculated]]
    return float(fisher_exact(table, alternative="less").pvalue)


def drop_power(*, family_rate: float, plain_rate: float, family_n: int, plain_n: int, alpha: float) -> float:
    """Probability that the test rejects at `alpha` when family answers speculate at `family_rate` and plain ones at
    `plain_rate` (each answer independently), with these numbers of stated answers."""
    import numpy as np
    from scipy import stats
    return float(stats.binom.pmf(np.arange(family_n + 1), family_n, family_rate) @ _rejects(family_n, plain_n, alpha)
                 @ stats.binom.pmf(np.arange(plain_n + 1), plain_n, plain_rate))


@lru_cache(maxsize=64)
def _rejects(family_n: int, plain_n: int, alpha: float):
    """1.0 where (family speculated, plain speculated) counts reject at `alpha`."""
    import numpy as np
    return np.array([[drop_pvalue(Share(family_n, family_n, kf), Share(plain_n, plain_n, kp)) < alpha
                      for kp in range(plain_n + 1)] for kf in range(family_n + 1)], dtype=float)


def detectable_share(*, plain_rate: float, family_n: int, plain_n: int, alpha: float) -> float:
    """The highest family share of speculating answers the test sees with POWER (0.0 when even none is not seen)."""
    from scipy.optimize import brentq

    def beyond_target(rate: float) -> float:   # falls as the family's share rises towards the plain one
        return drop_power(family_rate=rate, plain_rate=plain_rate, family_n=family_n, plain_n=plain_n,
                          alpha=alpha) - POWER
    if not family_n or not plain_n or beyond_target(0.0) < 0:
        return 0.0
    return max(0.0, float(brentq(beyond_target, 0.0, plain_rate, xtol=1e-5)) - 1e-5)   # where power >= POWER


@dataclass(frozen=True)
class DropVerdict:
    """One family's speculation share against the plain requests' at the run's alpha, and what it could see."""

    family: Share
    plain: Share
    alpha: float
    p_value: float | None
    detectable: float      # the highest family share seen with POWER at this plain share and these answers

    @classmethod
    def of(cls, family: Share, plain: Share, *, alpha: float) -> "DropVerdict":
        detectable = detectable_share(plain_rate=plain.rate or 0.0, family_n=family.stated, plain_n=plain.stated,
                                      alpha=alpha)
        return cls(family, plain, alpha, drop_pvalue(family, plain), detectable)

    @property
    def off(self) -> bool:
        return self.p_value is not None and self.p_value < self.alpha

    @property
    def powered(self) -> bool:
        return self.plain.rate is not None and self.detectable >= DETECT_RATIO * self.plain.rate

    def could_detect(self, family: str) -> str:
        return (f"speculation silently off for {family} requests, or on part of them (llama.cpp#19231: the first "
                f"chat request only): a {family} share of speculating answers of {self.detectable:.2f} or less "
                f"against the plain share {self.plain.rate or 0:.2f} ({self.family.stated} against "
                f"{self.plain.stated} answers stating their drafting), power {POWER:g} at alpha {self.alpha:g}")

    def coverage(self, family: str) -> dict[str, Any]:
        """The spec-path coverage row's fields (FindingSink.cover keywords)."""
        return {"verified": self.powered, "could_detect": self.could_detect(family),
                "ran": {"family answers": self.family.stated, "answers that speculated": self.family.speculated,
                        "plain answers": self.plain.stated, "plain answers that speculated": self.plain.speculated},
                "reason": self.shortfall(family)}

    def shortfall(self, family: str) -> str:
        if self.powered:
            return ""
        claimed = DETECT_RATIO * (self.plain.rate or 0)
        return (f"{self.family.stated} {family} and {self.plain.stated} plain answers stated their drafting (plain "
                f"requests: {self.plain.phrase()}): the test sees a {family} share of "
                f"{self.detectable:.2f} or less, not the {DETECT_RATIO:g} x plain share ({claimed:.2f}) this family "
                f"claims")


def unseen(family: Family, candidate) -> str:
    """Why the candidate's answers cannot show whether the family speculates, before any is sent ('' when they can):
    it lacks the family's capability, or its server counts drafts only server-wide."""
    if family.capability and not candidate.capabilities.has(family.capability):
        return f"not verified: '{candidate.name}' lacks {family.capability}, so {family.name} requests are not sent"
    if (candidate.inventory().extra or {}).get("per_response_evidence") is False:
        return (f"not verified: '{candidate.name}' states no drafting per answer (its server counts drafts only "
                f"server-wide), so whether {family.name} requests speculate cannot be seen")
    return ""


def unjudged(family: Family, route: str, share: Share, plain: Share) -> str:
    """Why the answers cannot be judged ('' when they can): none stated its drafting, or plain requests did not
    speculate either."""
    if not share.stated or not plain.stated:
        return (f"not verified: '{route}' states no drafting per answer, so whether {family.name} "
                f"requests speculate cannot be seen")
    if not plain.speculated:
        return (f"not verified: plain requests did not speculate on '{route}' either ({plain.phrase()}): "
                f"the speculation status of the run says why")
    return ""


def parity_unverified(family: Family, drop: DropVerdict, *, route: str) -> list[tuple[str, dict[str, Any]]]:
    """(check, coverage row fields) of each parity row that assumed the family speculates: not verified on the
    speculative path, since it was found off."""
    return [(check, {"verified": False, "part": part, "could_detect": f"{check} on speculated answers",
                     "reason": f"not verified on the speculative path: speculation is silently off for "
                               f"{family.name} requests on '{route}' ({drop.family.phrase()}; plain: "
                               f"{drop.plain.phrase()})"})
            for check, part in family.parity]


def off_finding(family: Family, drop: DropVerdict, plain_reqs: Sequence[Request], family_reqs: Sequence[Request],
                answers: Sequence[Completion], *, candidate, baseline) -> Finding:
    """The bug of a family found off: its share against the plain one, the parity rows it voids, a repro."""
    title = (f"speculation silently off for {family.name} requests: {drop.family.phrase()}, while plain requests did "
             f"({drop.plain.phrase()}; Fisher p={drop.p_value:.2g})")
    return Finding(check="spec-path", severity="bug", route=candidate.name, title=title,
                   details={"family": family.name, "family_share": drop.family.phrase(),
                            "plain_share": drop.plain.phrase(), "p_value": drop.p_value, "alpha": drop.alpha,
                            "could_detect": drop.could_detect(family.name),
                            "parity_rows_not_verified": [f"{c}: {p}" for c, p in family.parity],
                            "requests": [r.request_id for r in family_reqs],
                            "draft_tokens": [a.draft_tokens for a in answers],
                            "why": "answers stay correct, so every parity check of this feature passes "
                                   "without exercising the speculative path (vllm#34497, llama.cpp#19231)",
                            "repro": spec_path_repro(plain_reqs, family_reqs, family_name=family.name,
                                                     candidate=candidate, baseline=baseline)})
