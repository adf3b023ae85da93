"""Batch invariance (check family "batch-invariance"): the needle among companions, identical requests, seeds.

Three views of one property, each run on the candidate and, when it batches, on the baseline
(stressors/control.py): a needle prompt inside bursts of mixed companions must give its output alone;
N identical greedy requests under load must give one output, the serial one; a seeded sampled request
must give the same tokens serially (twice) and under load. Greedy differences are judged by the run's
near-tie policy (stressors/near_tie.py). Environment: none.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace

from spec_route_suite.equivalence.greedy import first_divergence
from spec_route_suite.reports.findings import UNDER_LOAD, Finding
from spec_route_suite.reports.repro_spec import load_repro, repeat_repro
from spec_route_suite.routes.base import Request
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.control import Count, LoadComparison, TopUp, differing, resend
from spec_route_suite.stressors.driver import LoadRun, Submission, burst, drive_handle, failure_finding, plan
from spec_route_suite.stressors.pair import CanaryStressor

CHECK = "batch-invariance"
SAMPLING_TEMPERATURE = 1.0


def levels_text(budget) -> str:
    return ",".join(map(str, budget.levels))


@dataclass
class NeedleBatches(CanaryStressor):
    """Needle prompts (long recall items) in seeded bursts of companions at every level; what changed, and in
    which batch."""

    check = CHECK
    broken: list = field(default_factory=list)   # (severity, outcome, the batch's order, why)
    checked: int = 0
    batches: list = field(default_factory=list)  # (submissions, concurrency) of every burst: a control round resends them

    def send(self, budget, findings, *, seed: int) -> None:
        workload = self.workload
        rng, latency = random.Random(f"needle-{seed}"), mean_latency(self.references)
        needles = [i.key for i in workload.recall() if i.length == "long"] or list(workload.keys)
        self.start()
        for level in budget.levels:
            for b in range(budget.needle_batches):
                needle = needles[b % len(needles)]
                companions = rng.sample([k for k in workload.keys if k != needle],
                                        min(budget.batch(level) - 1, len(workload.items) - 1))
                order = companions + [needle]
                rng.shuffle(order)
                self._batch(order, level, tag=f"needle-c{level}-b{b}", latency=latency, findings=findings)

    def _batch(self, order: list[str], level: int, *, tag: str, latency: float, findings) -> None:
        subs = plan(((k, self.request(k)) for k in order), offsets=burst(len(order)), tag=tag)
        self.batches.append((subs, level))
        run = self.drive(subs, concurrency=level, latency=latency)
        self.control.run(subs, concurrency=level, mean_latency_s=latency)
        if run.failed:
            findings.add(failure_finding(run, check=CHECK, route=self.candidate.name, what="needle batch",
                                         repro=self.windows.failed(run)))
        self.checked += len(run.completed)
        self.broken += [(severity, outcome, order, why) for severity, outcome, why in self.mismatches(run.completed)]

    def comparison(self, budget) -> LoadComparison:
        return self.control.compare(what="differ from their output alone", candidate=Count(len(self.broken),
                                                                                             self.checked),
                                    baseline=self.control.differing(), where=f"at c={levels_text(budget)}",
                                    top_up=resend(self.candidate, self.references, self.batches,
                                                  mean_latency_s=mean_latency(self.references)))

    def summary(self, findings, comparison: LoadComparison, budget) -> None:
        self.witness.cover(findings, CHECK, could_detect=f"a greedy output that changes with batch composition "
                                                         f"({comparison.control_text()})")
        self.info(findings, f"needle: {self.checked} outputs in {budget.needle_batches} mixed batches per level "
                            f"{list(budget.levels)} compared with their outputs alone; {len(self.broken)} differ; "
                            f"{comparison.control_text()}",
                  {"budget": budget.describe(), "load_control": comparison.as_details()})

    def changed(self, findings, comparison: LoadComparison, budget) -> None:
        """One finding per severity: the outputs that changed with their batch's composition."""
        for severity in ("bug", "near-tie"):
            cases = [c for c in self.broken if c[0] == severity]
            if not cases:
                continue
            _, outcome, order, why = cases[0]
            findings.add(Finding(
                check=CHECK, severity=severity, route=self.candidate.name, prompt_id=outcome.key,
                title=f"{len(cases)} greedy outputs changed with batch composition ({severity}; "
                      f"{comparison.sentence()}); e.g. {outcome.key}: {why}",
                details={"cause": UNDER_LOAD, "examples": [{"request": o.request_id, "batch": ordr, "why": w,
                                       "got": o.completion.text[:200], "alone": self.references[o.key].text[:200]}
                                      for _, o, ordr, w in cases[:10]], "budget": budget.describe(),
                         "load_control": comparison.as_details(), "repro": self.windows.repro(outcome.request_id)}))

    @property
    def bugs(self) -> list:
        return [c for c in self.broken if c[0] == "bug"]


def output_text(run: LoadRun, token_ids) -> str:
    return next(o.completion.text for o in run.completed if o.completion.token_ids == token_ids)[:200]


@dataclass
class IdenticalRequests(CanaryStressor):
    """N copies of one recall prompt in one burst at the highest level: how many distinct outputs."""

    check = CHECK
    item: object = None
    n: int = 0
    run: LoadRun | None = None
    subs: list = field(default_factory=list)

    def send(self, budget, findings) -> None:
        self.item = item = next(iter(self.workload.recall()), self.workload.items[0])
        level, self.n = budget.batch(max(budget.levels)), budget.identical_requests
        latency = mean_latency(self.references)
        self.subs = subs = plan(((item.key, self.request(item.key)) for _ in range(self.n)), offsets=burst(self.n),
                                tag="identical")
        self.start()
        self.run = run = self.drive(subs, concurrency=level, latency=latency)
        self.control.run(subs, concurrency=level, mean_latency_s=latency)
        if run.failed:
            findings.add(failure_finding(run, check=CHECK, route=self.candidate.name, what="identical requests",
                                         repro=self.windows.failed(run)))

    @property
    def outputs(self) -> Counter:
        return Counter(o.completion.token_ids for o in self.run.completed)

    @property
    def reference(self):
        return self.references[self.item.key].token_ids

    def agree(self) -> bool:
        """One output, the serial one (or nothing completed)."""
        outputs = self.outputs
        return len(outputs) <= 1 and (not outputs or self.reference in outputs)

    def comparison(self) -> LoadComparison:
        return self.control.compare(what="differ from the serial output",
                                    candidate=differing(self.run.outcomes, self.references),
                                    baseline=self.control.differing(), where=f"at c={self.run.concurrency}",
                                    top_up=resend(self.candidate, self.references, [(self.subs, self.run.concurrency)],
                                                  mean_latency_s=mean_latency(self.references)))

    def summary(self, findings, comparison: LoadComparison, budget) -> str:
        """The coverage row and the determinism line (also the title of a split's finding)."""
        run, outputs = self.run, self.outputs
        self.witness.cover(findings, CHECK, could_detect=f"distinct outputs among {self.n} identical greedy "
                                                         f"requests ({comparison.control_text()})")
        title = (f"determinism: {len(outputs)} distinct outputs in {len(run.completed)} identical greedy requests "
                 f"at concurrency {run.concurrency}; {outputs.get(self.reference, 0)} equal the serial output; "
                 f"{comparison.control_text()}")
        self.info(findings, title, {"budget": budget.describe(), "prompt": self.item.key,
                                    "load_control": comparison.as_details()})
        return title

    def split(self, findings, comparison: LoadComparison, title: str) -> tuple[str, str]:
        """The outputs that split from the serial one, judged; (severity, first why), recorded as one finding."""
        run, reference, item = self.run, self.reference, self.item
        splits = sorted({first_divergence(baseline=reference, candidate=o) for o in self.outputs if o != reference})
        judged = [self.pair.judge(item.prompt_ids, self.references[item.key],
                                  next(c.completion for c in run.completed if c.completion.token_ids == o))
                  for o in self.outputs if o != reference]
        severity = "bug" if any(s == "bug" for s, _ in judged) else "near-tie"
        findings.add(Finding(check=CHECK, severity=severity, route=self.candidate.name, prompt_id=item.key,
                             title=title + f"; first split at token {splits[0] if splits else '?'} ({severity}; "
                                           f"{comparison.sentence()})",
                             details={"cause": UNDER_LOAD, "distinct": [{"count": c, "text": output_text(run, o)}
                                                   for o, c in self.outputs.most_common(10)],
                                      "why": [why for _, why in judged[:10]], "serial": self.references[item.key].text,
                                      "load_control": comparison.as_details(),
                                      "repro": self.windows.repro(next(o.request_id for o in run.completed
                                                                       if o.completion.token_ids != reference))}))
        return severity, judged[0][1]


def seeded_plans(workload, budget, max_tokens: int, *, seed: int,
                 round_: int = 0) -> list[tuple[Request, list[Submission]]]:
    """Per seed: the seeded request and the load run it joins (companions and position fixed by the run seed),
    built once so the candidate and its load control get exactly the same requests. `round_` > 0: the seeds of
    a round the load control buys (stressors/control.py), each a seed of its own."""
    rng = random.Random(f"seeded-{seed}" + (f"-more{round_}" if round_ else ""))
    prefix = f"seeded-more{round_}-" if round_ else "seeded-"
    plans = []
    for s in range(budget.seeds):
        item = workload.items[s % len(workload.items)]
        seeded = item.request(max_tokens=max_tokens, temperature=SAMPLING_TEMPERATURE,
                              seed=seed * 1000 + round_ * budget.seeds + s, request_id=f"{prefix}{s}-a")
        companions = rng.sample([k for k in workload.keys if k != item.key],
                                min(budget.batch(max(budget.levels)) - 1, len(workload.items) - 1))
        subs = plan(((k, workload.get(k).request(max_tokens=max_tokens)) for k in companions),
                    offsets=burst(len(companions)), tag=f"{prefix}load-{s}")
        subs.insert(rng.randrange(len(subs) + 1),
                    Submission(key=item.key, request=replace(seeded, request_id=f"{prefix}{s}-load")))
        plans.append((seeded, subs))
    return plans


def seeded_problems(route, plans, *, concurrency: int, latency: float,
                    witness=None) -> list[tuple[int, str, str]]:
    """(seed, what went wrong, the request id that failed under load or "") for each seeded request of `plans`
    on `route`: serially twice, then under load."""
    problems = []
    for seeded, subs in plans:
        first = route.generate(seeded)
        second = route.generate(replace(seeded, request_id=seeded.request_id[:-1] + "b"))
        if first.token_ids != second.token_ids:
            problems.append((seeded.seed, f"seed {seeded.seed}: two serial runs differ: {first.text[:60]!r} vs "
                                          f"{second.text[:60]!r}", ""))
            continue
        run = drive_handle(route, subs, concurrency=concurrency, mean_latency_s=latency)
        if witness is not None:
            witness.add(run)
        load_id = seeded.request_id[:-1] + "load"
        loaded = run.by_id().get(load_id)
        if loaded is None or not loaded.ok:
            why = loaded.error if loaded else "never sent"
            problems.append((seeded.seed, f"seed {seeded.seed}: failed under load: {why}", load_id))
        elif loaded.completion.token_ids != first.token_ids:
            problems.append((seeded.seed, f"seed {seeded.seed}: serial {first.text[:60]!r}, under load at "
                                          f"concurrency {run.concurrency} {loaded.completion.text[:60]!r}", ""))
    return problems


def seeded_count(problems, plans) -> Count:
    """Seeds not reproducible of the seeds that answered; a seeded request that failed under load is named."""
    failed = tuple(rid for _, _, rid in problems if rid)
    return Count(len({seed for seed, _, rid in problems if not rid}), len(plans) - len(failed), failed)


def seeded_top_up(candidate, workload, budget, max_tokens: int, *, seed: int, concurrency: int,
                  latency: float) -> TopUp:
    """A round of seeds the load control buys: as many new seeds as the budget's, on either route."""
    def probe(route, _references, round_: int) -> Count:
        plans = seeded_plans(workload, budget, max_tokens, seed=seed, round_=round_)
        return seeded_count(seeded_problems(route, plans, concurrency=concurrency, latency=latency), plans)
    requests = budget.seeds * (2 + min(budget.batch(max(budget.levels)), len(workload.items)))
    return TopUp(candidate, None, probe, requests=requests)


def seeded_repro(problem: tuple[int, str], plans, *, candidate, baseline, concurrency: int) -> dict:
    """The seeded request sent twice (serial runs differ), or its load run replayed (it changed under load)."""
    seeded, subs = next((req, subs) for req, subs in plans if req.seed == problem[0])
    if "two serial runs differ" in problem[1]:
        return repeat_repro(seeded, candidate=candidate, baseline=baseline)
    return load_repro([(sub.request, 0, None) for sub in subs], candidate=candidate, baseline=baseline,
                      concurrency=concurrency, note=f"the seeded request {seeded.request_id} among its companions")


def seeded_budget_note(candidate, stress_budget, comparison) -> Finding:
    """What the seeds check compared, and against which control (an info line of the report)."""
    return Finding(check=CHECK, severity="info", route=candidate.name,
                   title=f"seeded sampling: {stress_budget.seeds} seeds compared serially (twice) and under load; "
                         f"{comparison.control_text()}",
                   details={"budget": stress_budget.describe(), "temperature": SAMPLING_TEMPERATURE,
                            "load_control": comparison.as_details()})
