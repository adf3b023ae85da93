"""Agent sessions: multi-turn tool-using conversations driven against a route, serially or all at once.

Why: the agentic bugs upstream show across turns and sessions (tool calls worse over sessions until a
restart, a single request after a burst answered wrongly), which one request at a time never shows. A
session asks its plan's questions in order (spec_route_suite/prompts/agentic.py); each answer with tool calls is
sent back with the client's results (tools.call_tool) and the route asked again (at most MAX_CALL_ROUNDS
times per question); an answer without calls closes the question. The transcript is every (request,
answer) pair, so two routes' sessions can be compared turn by turn while their conversations agree.
Half the sessions stream their turns (agent clients stream), half do not, so both parser paths run.
Environment: none.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from spec_route_suite.equivalence.agentic import agent_request
from spec_route_suite.prompts.agentic import SessionPlan, call_turns
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.errors import RouteError, RouteTimeout
from spec_route_suite.stressors.driver import LoadRun, Outcome

MAX_CALL_ROUNDS = 2


@dataclass(frozen=True)
class Turn:
    request: Request
    answer: Completion | None
    started_s: float = 0.0
    ended_s: float = 0.0
    route_error: RouteError | None = None   # what failed the turn, for its error finding (a timeout as RouteTimeout)

    @property
    def error(self) -> str:
        """What failed the turn, as one line; empty for an answered turn."""
        return f"{type(self.route_error).__name__}: {self.route_error}" if self.route_error is not None else ""


@dataclass
class Transcript:
    plan: SessionPlan
    stream: bool
    turns: list[Turn] = field(default_factory=list)
    ended: str = "done"          # done / error / context (the next turn would not fit)

    def answers(self) -> list[Completion]:
        return [t.answer for t in self.turns if t.answer is not None]


@dataclass(frozen=True)
class SessionSettings:
    tokenizer: Any
    max_tokens: int
    fits: Callable[[Request], bool]
    timeout_s: float


async def run_session(route: Any, plan: SessionPlan, settings: SessionSettings, *, tag: str, stream: bool,
                      questions: int | None = None, clock: Callable[[], float] = time.perf_counter) -> Transcript:
    """One session against `route` (a Route: its async generate), question after question."""
    transcript = Transcript(plan=plan, stream=stream)
    messages: list[dict[str, Any]] = [{"role": "system", "content": plan.system}]
    for question in plan.questions[:questions]:
        messages.append({"role": "user", "content": question})
        for round_ in range(MAX_CALL_ROUNDS + 1):
            n = len(transcript.turns)
            req = agent_request(settings.tokenizer, messages, plan.tools, max_tokens=settings.max_tokens,
                                request_id=f"{tag}-{plan.key}-{n}", stream=stream)
            if not settings.fits(req):
                transcript.ended = "context"
                return transcript
            start = clock()
            try:
                answer = await asyncio.wait_for(route.generate(req), settings.timeout_s)
            except (RouteError, asyncio.TimeoutError) as exc:
                error = exc if isinstance(exc, RouteError) else RouteTimeout(
                    f"no answer within {settings.timeout_s:g}s", route=route.name,
                    request_id=req.request_id)
                transcript.turns.append(Turn(req, None, start, clock(), error))
                transcript.ended = "error"
                return transcript
            transcript.turns.append(Turn(req, answer, start, clock()))
            if answer.tool_calls and round_ < MAX_CALL_ROUNDS:
                messages += call_turns([(c.name, c.arguments) for c in answer.tool_calls], turn=n)
                continue
            messages.append({"role": "assistant", "content": answer.text})
            break
    return transcript


def streams(index: int) -> bool:
    """Odd sessions stream their turns, even ones do not."""
    return index % 2 == 1


async def run_serially(route: Any, plans: Sequence[SessionPlan], settings: SessionSettings, *, tag: str
                       ) -> dict[str, Transcript]:
    out = {}
    for index, plan in enumerate(plans):
        out[plan.key] = await run_session(route, plan, settings, tag=tag, stream=streams(index))
    return out


async def run_together(route: Any, plans: Sequence[SessionPlan], settings: SessionSettings, *, tag: str
                       ) -> dict[str, Transcript]:
    """Every session at once: their turns meet in the engine's batches."""
    done = await asyncio.gather(*(run_session(route, plan, settings, tag=tag, stream=streams(index))
                                  for index, plan in enumerate(plans)))
    return {t.plan.key: t for t in done}


def as_load_run(transcripts: Sequence[Transcript], *, started: float, concurrency: int) -> LoadRun:
    """The turns of concurrent sessions as a load run, for the stressors' overlap witness (coverage.py)."""
    outcomes = tuple(Outcome(key=t.plan.key, request_id=turn.request.request_id, completion=turn.answer,
                             error_kind="error" if turn.error else None, error=turn.error or None,
                             started_s=turn.started_s - started, ended_s=turn.ended_s - started, in_flight_at_start=0)
                     for t in transcripts for turn in t.turns)
    wall = max((o.ended_s for o in outcomes), default=0.0)
    return LoadRun(outcomes=outcomes, concurrency=concurrency, max_in_flight=concurrency, wall_s=wall,
                   started_at=started)


def paired_turns(reference: Transcript, actual: Transcript) -> list[tuple[Turn, Turn]]:
    """The turns both transcripts took from the same conversation: pairs up to the first turn whose
    conversation differs (an earlier answer differed, so later prompts are not comparable)."""
    pairs = []
    for ours, theirs in zip(reference.turns, actual.turns):
        if ours.request.messages != theirs.request.messages:
            break
        pairs.append((ours, theirs))
    return pairs


def history_before(transcripts: Sequence[Transcript], turn: Turn, *, limit: int) -> list[Request]:
    """The last `limit` requests the route got before `turn` started, over all its transcripts, in the order
    they started: what a repro resends first when a turn fails because of what came before it."""
    earlier = sorted((t for transcript in transcripts for t in transcript.turns if t.started_s < turn.started_s),
                     key=lambda t: t.started_s)
    return [t.request for t in earlier[-limit:]] if limit > 0 else []
