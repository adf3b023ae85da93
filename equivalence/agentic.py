"""The agentic request shape (check family "agentic"): what a chat answer with tools says, and how two are judged.

Why: since 2025 speculative bugs moved into the server-side parsers fed several tokens per step (tool
calls malformed under MTP, reasoning leaking into `content`, calls worse over sessions), which token-id
checks never see: two answers can share every token and still differ in `tool_calls`. An answer is
judged on what the server parsed out of it: its tool calls (names, and arguments compared as parsed
JSON), its reasoning, its content and its finish_reason; different tokens underneath are a greedy
divergence, classified like the greedy check's (a near-tie does not fail under --greedy-policy classify).
Content or reasoning absent and empty are the same. A family only counts where it could fail: its
coverage rows say how many answers carried parsed tool calls and reasoning on each route, and read
"not verified" when none did (a server started without its tool or reasoning parser), "not applicable" for a
model whose chat template offers no tools, or "not supported" when the server refused `tools`.
Environment: none.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import pytest

from spec_route_suite.equivalence.divergence import classify_divergence
from spec_route_suite.equivalence.greedy import compare_greedy
from spec_route_suite.embedded import tools
from spec_route_suite.routes.chat import ChatRenderError, as_openai, chat_request
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.errors import CapabilityMissing, FeatureUnsupported, RouteError, RouteHTTPError
from spec_route_suite.reports.findings import DIVERGES, PARSED_OTHERWISE, Finding
from spec_route_suite.reports.repro_spec import parity_repro

CHECK = "agentic"
# what a repro compares: the parsed message (tool calls with parsed arguments, reasoning, content) and the tokens
REPRO_FIELDS = ("ids", "text", "reasoning", "tool_calls", "finish")
HISTORY = 3   # requests sent to the candidate before a failing one that its repro resends first (carried state)
REFUSAL_STATUS = (400, 422, 501)   # a 500 is an engine failure, never a refusal
COULD_DETECT = ("tool calls (names, parsed arguments), reasoning, content or finish_reason that differ from the "
                "baseline's on the same chat request with tools")


def agent_request(tokenizer: Any, messages: Sequence[Any], tools: Sequence[Any], *, max_tokens: int,
                  request_id: str, stream: bool = False) -> Request:
    return chat_request(tokenizer, messages, max_tokens=max_tokens, request_id=request_id, tools=tools,
                        stream=stream)


@dataclass(frozen=True)
class AgentView:
    """What a chat answer says, as compared: absent and empty text are the same, arguments as parsed JSON."""

    finish: str
    content: str
    reasoning: str
    calls: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, c: Completion) -> "AgentView":
        return cls(finish=c.finish_reason, content=c.text or "", reasoning=c.reasoning or "",
                   calls=tuple((call.name, parsed_arguments(call.arguments)) for call in c.tool_calls))


def parsed_arguments(text: str) -> Any:
    """Arguments as parsed JSON (key order does not matter); the raw text, tagged, when they are not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return {"<not JSON>": text}


def differences(expected: Completion, actual: Completion) -> list[str]:
    """The fields that differ, each with both values (baseline first)."""
    a, b = AgentView.of(expected), AgentView.of(actual)
    out = []
    for name in ("calls", "reasoning", "content", "finish"):
        if getattr(a, name) != getattr(b, name):
            label = {"calls": "tool_calls", "finish": "finish_reason"}.get(name, name)
            out.append(f"{label}: baseline {getattr(a, name)!r} vs candidate {getattr(b, name)!r}")
    return out


@dataclass
class Evidence:
    """How many answers per route carried what the servers' parsers found: the proof the check could fail."""

    routes: tuple[str, str]
    answers: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    reasoning: dict[str, int] = field(default_factory=dict)

    def add(self, route: str, completion: Completion) -> None:
        self.answers[route] = self.answers.get(route, 0) + 1
        self.calls[route] = self.calls.get(route, 0) + bool(completion.tool_calls)
        self.reasoning[route] = self.reasoning.get(route, 0) + (completion.reasoning is not None)

    def ran(self) -> dict[str, int]:
        base, cand = self.routes
        return {"candidate answers": self.answers.get(cand, 0),
                "with tool_calls (candidate)": self.calls.get(cand, 0),
                "with reasoning (candidate)": self.reasoning.get(cand, 0),
                "with tool_calls (baseline)": self.calls.get(base, 0),
                "with reasoning (baseline)": self.reasoning.get(base, 0)}

    def blind(self) -> str:
        """Why the answers could not show a parser bug ("" when they could)."""
        gaps = [f"no {what} answer carried parsed {field_}" for field_, counts in
                (("tool_calls", self.calls), ("reasoning", self.reasoning))
                for what, route in zip(("baseline", "candidate"), self.routes) if not counts.get(route)]
        if not gaps:
            return ""
        return ("; ".join(gaps) + " (a server started without its tool or reasoning parser, e.g. vLLM without "
                "--enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser deepseek_r1 or llama.cpp "
                "without --jinja, or a model whose chat template offers no tools)")

    def cover(self, findings, candidate: str, *, part: str, could_detect: str = COULD_DETECT) -> None:
        why = self.blind()
        findings.cover(CHECK, candidate, verified=not why, ran=self.ran(), could_detect=could_detect, reason=why,
                       part=part)


NO_TOOLS = ("not applicable: every route's engine renders a chat request the same with and without tools (its chat "
            "template takes no tools, so no tool call can reach the server's parsers)")


def cover_lacking(findings, candidate: str, *, part: str, reason: str) -> None:
    """The coverage row of a part that could not run: "not applicable" when the engines themselves render no tools
    (like a prefix-cache check on an engine without one), "not verified" for anything else."""
    findings.cover(CHECK, candidate, verified=False, applicable=reason != NO_TOOLS, part=part,
                   could_detect=COULD_DETECT, reason=reason)


def lacking(tokenizer: Any, *handles: Any) -> str | None:
    """Why the agentic shape cannot run on these routes (None when it can): a route without chat; engines that all
    render no tools (NO_TOOLS, decided by each engine's own count of one question with and without a tool, never by
    the suite's local template); an engine that cannot say whether it does, or cannot render the question."""
    for handle in handles:
        if not handle.capabilities.chat:
            why = handle.route.chat_unsupported_why or "the route declares no chat capability"
            return f"not verified: route '{handle.name}' lacks chat ({why})"
    question = [{"role": "user", "content": "Hi."}]
    try:
        probes = [chat_request(tokenizer, question, max_tokens=1, request_id="agentic-tools-probe", **extra)
                  for extra in ({"tools": [tools.TOOLS["get_weather"].definition]}, {})]
    except ChatRenderError as exc:
        return f"not verified: the suite's tokenizer cannot render a chat question ({exc})"
    silent = []
    for handle in handles:
        try:
            offered, plain = (handle.rendered_tokens(probe) for probe in probes)
        except ChatRenderError as exc:
            return f"not verified: route '{handle.name}' cannot render a chat question with tools ({exc})"
        except RouteError as exc:
            return (f"not verified: whether route '{handle.name}' renders tools cannot be told: its server did not "
                    f"answer a one-token chat request with tools ({exc.describe()[:300]})")
        if offered is None or plain is None:
            silent.append(handle.name)
        elif offered != plain:
            return None   # this engine offers the model tools: the check can run
    if silent:
        return (f"not verified: whether route(s) {', '.join(repr(n) for n in silent)} render tools cannot be told "
                f"(the server states no prompt token count), and no route's engine showed that it does")
    return NO_TOOLS


UNRENDERED = "cannot be rendered"


def sized_request(prompt: Any, *, tokenizer: Any, max_tokens: int, stream: bool, context_fit: Any,
                  routes: Sequence[Any]) -> tuple[Request | None, str]:
    """(the parity prompt's request, "") when it can be sent; (None, why) when it cannot: longer than the pair's
    context as the suite or a route's engine renders it, or a conversation the suite's tokenizer or an engine
    cannot render at all (a `tool` turn its template does not know: `why` then says UNRENDERED). Never sent,
    never a harness crash."""
    try:
        req = agent_request(tokenizer, prompt.messages, prompt.tools, max_tokens=max_tokens, stream=stream,
                            request_id=f"agentic-{'stream' if stream else 'plain'}-{prompt.id}")
        misfit = context_fit.misfit(req, routes)
    except ChatRenderError as exc:
        return None, f"{prompt.id} {UNRENDERED} ({exc})"
    return (None, f"{prompt.id}: {misfit}") if misfit else (req, "")


def parity_lacking(mode: str, tokenizer: Any, baseline, candidate) -> str | None:
    """Why the parity test cannot run in `mode` on these routes (None when it can): what `lacking` says, or, streamed,
    a route that cannot stream."""
    return lacking(tokenizer, baseline, candidate) or (
        None if mode == "plain" or (baseline.capabilities.stream and candidate.capabilities.stream)
        else "not verified: a route cannot stream")


def cover_parity(findings, candidate: str, *, part: str, evidence: Evidence, left_out: Sequence[str]) -> None:
    """The parity test's records once every prompt ran: the prompts left out, the evidence's coverage rows, and the
    part of the prompts that could not be rendered."""
    if left_out:
        findings.measure("agentic_left_out", route=candidate, prompts=left_out)
    evidence.cover(findings, candidate, part=part)
    cover_unrendered(findings, candidate, part=part, whys=[w for w in left_out if UNRENDERED in w])


def cover_unrendered(findings, candidate: str, *, part: str, whys: Sequence[str]) -> None:
    """Prompts a pair or a server cannot render: the part is not verified, naming them and why."""
    if whys:
        findings.cover(CHECK, candidate, verified=False, part=part, could_detect=COULD_DETECT,
                       ran={"prompts not rendered": len(whys)}, reason="not verified: " + "; ".join(whys)[:600])


def answer(handle: Any, req: Request, findings, candidate: str, part: str) -> Completion:
    """The route's answer; a route that refuses tools (or chat) skips the test: "not supported" when it is the
    candidate, "not verified" when it is the baseline."""
    try:
        return handle.generate(req)
    except (CapabilityMissing, FeatureUnsupported) as exc:
        why = f"route '{handle.name}' cannot serve chat requests with tools ({exc})"
    except RouteHTTPError as exc:
        if exc.status not in REFUSAL_STATUS:
            raise
        why = f"route '{handle.name}' refused a chat request with tools: {str(exc)[:300]}"
    findings.cover(CHECK, candidate, verified=False, supported=handle.name != candidate, part=part,
                   could_detect=COULD_DETECT, reason=why)
    pytest.skip(f"not verified: {why}")


def judge(expected: Completion, actual: Completion, *, req: Request, label: str, prompt_id: str, baseline,
          candidate, tokenizer, suite_config, calibration, eos_token_id, findings,
          history: Sequence[Request] = (), cause: str | None = None) -> str | None:
    """Compare one answer pair; record a finding for a difference; the failure message (None: no failure).
    `history`: the requests the candidate got just before this one, which its repro resends first. The finding names
    its cause (a divergence, the same tokens parsed otherwise) unless the caller knows a better one (`cause`: the
    candidate's own answer alone differs too, so it differs under load)."""
    ids = bool(expected.token_ids) and bool(actual.token_ids) and not (expected.text_level or actual.text_level)
    if ids and expected.token_ids != actual.token_ids:
        divergence = compare_greedy(baseline=expected, candidate=actual, decode=tokenizer.decode)
        verdict = classify_divergence(baseline=baseline, prompt_ids=req.prompt_ids, divergence=divergence,
                                      baseline_completion=expected, candidate_completion=actual,
                                      max_tokens=req.max_tokens, tau=calibration.get().tau,
                                      eos_token_id=eos_token_id, decode=tokenizer.decode)
        excused = suite_config.greedy_policy == "classify" and verdict.is_near_tie
        title = (f"agentic {label} of {prompt_id}: output tokens diverge from the baseline at token "
                 f"{divergence.position} ({verdict.verdict})")
        _record(findings, title, "near-tie" if excused else "bug", req, expected, actual, baseline, candidate, prompt_id,
                history, diff=divergence.diff() + f"\n  classification: {verdict.summary()}",
                divergence=dataclasses.asdict(divergence), classification=verdict.to_details(), cause=cause or DIVERGES)
        return None if excused else title
    diffs = differences(expected, actual)
    if not diffs:
        return None
    same = ids and expected.token_ids == actual.token_ids
    fields = ", ".join(d.partition(":")[0] for d in diffs)
    title = (f"agentic {label} of {prompt_id}: {fields} differ from the baseline"
             + (" on identical output tokens (the server's parsers)" if same else ""))
    _record(findings, title, "bug", req, expected, actual, baseline, candidate, prompt_id, history,
            diff="\n".join(diffs), **({"cause": cause or PARSED_OTHERWISE} if same or cause else {}))
    return title


def _record(findings, title: str, severity: str, req: Request, expected: Completion, actual: Completion, baseline,
            candidate, prompt_id: str, history: Sequence[Request], **details: Any) -> None:
    findings.add(Finding(
        check=CHECK, severity=severity, route=candidate.name, prompt_id=prompt_id, title=title,
        details={**details, "messages": as_openai(req.messages), "tools": json.loads(req.tools or "[]"),
                 "stream": req.stream, "baseline": answer_details(expected), "candidate": answer_details(actual),
                 "repro": parity_repro([req], candidate=candidate, baseline=baseline, fields=REPRO_FIELDS,
                                       expected=[expected], actual=[actual], history=history)}))


def answer_details(c: Completion) -> dict[str, Any]:
    return {"content": c.text, "reasoning": c.reasoning, "finish_reason": c.finish_reason,
            "tool_calls": [{"name": t.name, "arguments": t.arguments} for t in c.tool_calls],
            "token_ids": list(c.token_ids)}
