"""Task accuracy of the user's prompts, serially and under load: the items, the judge, the tallies.

Why: the user-visible form of a speculation bug is a task answer that turns wrong ("GSM8K 95.7% -> 1.1% with
MTP", vllm#46834; "7 wrong of 100 at concurrency 8, 0 of 100 serially", sglang#36548). Each of the user's
prompts is a task item judged by its record's scorer (stressors/tasks/scorers.py); a multi-turn prompt (MT-Bench)
is one item per turn, each later turn built on the baseline's serial answer to the turn before, so both
routes answer identical conversations. Turn 1 is the greedy check's very request (its answers are reused
where the same worker already has them).
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from spec_route_suite.equivalence.chat import next_turn
from spec_route_suite.prompts.records import PromptRecord
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.stressors.accuracy.tally import Tally
from spec_route_suite.stressors.tasks.code_exec import passes
from spec_route_suite.stressors.tasks.scorers import CODE, code_of, gold_right, needs_reference, same_answer


@dataclass(frozen=True)
class TaskItem:
    """One judged answer: a prompt record's turn and the request that asks it."""

    key: str
    record: PromptRecord   # the turn's record (its scorer, answer, tests, class)
    request: Request


def greedy_item(record: PromptRecord, fitted_prompts, request_id: str | None = None) -> TaskItem:
    max_tokens = fitted_prompts.max_tokens_for(record)
    return TaskItem(key=record.id, record=record, request=Request(
        prompt_ids=fitted_prompts.ids(record, max_tokens), max_tokens=max_tokens, temperature=0.0,
        stop=record.stop, request_id=request_id or f"greedy-{record.id}"))


def task_items(records: Iterable[PromptRecord], fitted_prompts,
               baseline_answer: Callable[[TaskItem], Completion]) -> list[TaskItem]:
    """Every turn of every record as an item; a later turn needs the baseline's answer to the one before."""
    items = []
    for first in records:
        item = greedy_item(first, fitted_prompts)
        items.append(item)
        for turn in range(1, len(first.followups) + 1):
            record = next_turn(first, item.record, answer=baseline_answer(item).text, turn=turn)
            item = greedy_item(record, fitted_prompts, request_id=f"task-{record.id}")
            items.append(item)
    return items


@dataclass
class Judge:
    """Right or wrong for one answer of an item: the record's gold answer, its tests (execute=true), or parity
    with the baseline's serial answer (a near-tie counts as equal under --greedy-policy classify)."""

    references: Mapping[str, Completion]          # the baseline's serial answers, by item key
    executes: frozenset[str]                      # sources whose code answers are run against their tests
    near_tie: Callable[[TaskItem, Completion, Completion], bool]
    _ran: dict[tuple[str, str], bool] = field(default_factory=dict)

    def right(self, item: TaskItem, answer: Completion) -> bool:
        record = item.record
        if record.scorer == CODE and record.source in self.executes and record.tests:
            program = code_of(record, answer.text)
            if (item.key, program) not in self._ran:
                self._ran[(item.key, program)] = passes(program, record.tests)[0]
            return self._ran[(item.key, program)]
        gold = gold_right(record, answer.text)
        if gold is not None:
            return gold
        expected = self.references[item.key]
        return same_answer(record, expected, answer) or self.near_tie(item, expected, answer)

    def by_reference(self, item: TaskItem) -> bool:
        """Is this item judged against the baseline's answer (so the baseline cannot be scored on it)?"""
        return needs_reference(item.record, execute=item.record.source in self.executes)


def tally(label: str, judge: Judge, items: Mapping[str, TaskItem], answers: Iterable[tuple[str, Completion]], *,
          own_reference: bool = False) -> Tally:
    """Wrong answers among `answers` ((item key, answer) pairs). `own_reference`: the baseline's own answers,
    where parity items are left out (they are the reference)."""
    wrong, n = [], 0
    for key, answer in answers:
        item = items[key]
        if own_reference and judge.by_reference(item):
            continue
        n += 1
        if not judge.right(item, answer):
            wrong.append(key)
    return Tally(label=label, wrong=len(wrong), n=n, wrong_keys=tuple(wrong))


@dataclass(frozen=True)
class TaskFlip:
    """An answer right when sent alone and wrong under load."""

    request_id: str
    key: str
    serial_text: str
    load_text: str

    def line(self) -> str:
        return f"{self.request_id}: alone {self.serial_text[:70]!r}, under load {self.load_text[:70]!r}"


def task_flips(judge: Judge, items: Mapping[str, TaskItem], serial: Mapping[str, Completion],
               outcomes: Sequence) -> list[TaskFlip]:
    """Outcomes judged wrong under load whose serial answer was right."""
    found = []
    for outcome in outcomes:
        if not outcome.ok or outcome.key not in serial:
            continue
        item = items[outcome.key]
        if judge.right(item, serial[outcome.key]) and not judge.right(item, outcome.completion):
            found.append(TaskFlip(outcome.request_id, outcome.key, serial[outcome.key].text, outcome.completion.text))
    return found


def by_source(tallies: Mapping[str, Tally]) -> str:
    """"gsm8k 1 wrong of 16, mt_bench 0 wrong of 32": one condition's tally split by source."""
    return ", ".join(f"{source} {t.wrong} wrong of {t.n}" for source, t in tallies.items())
