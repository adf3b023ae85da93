"""The canary workload: conversations whose correct answer exists only in their own context.

Why: the reported failure answered the last user message in *another* conversation's
context, fluently and confidently. To see that from outside, every conversation states
facts no other conversation states (canaries: pet names, locker codes, 3-digit lucky
numbers, names), then its last user message asks for one of them. A foreign canary in an
output names the conversation it leaked from. All conversations share a long system
prefix (system message plus shared turns) so prefix caches are exercised, and lengths
and acceptance profiles are mixed: recall answers with random codes are hard for the
drafter, code and JSON completions are easy. Phrasings come from the embedded corpus, so
the tiny target answers them correctly when run alone.

With the user's prompts (`--prompts`), the task slots carry them instead of corpus tasks (`padding`,
shape "user"): the canary conversations stay the mixing detector's instrument, and the user's prompts are
the load around them. A user item has no canaries and no answer the load checks judge (its own task
scorer runs in stressors/test_task_accuracy.py); its output under load must still equal its serial one.

Sizing: every prompt must fit the routes' context (`max_prompt_tokens`), with any other
conversation's question in its place too (mixing's context probes), whatever the tokenizer's
efficiency. A conversation too long drops filler turns; when even none fit, the whole pool is
built again with a shorter shared prefix (fresh canary values: a discarded attempt takes none);
when no prefix fits, WorkloadDoesNotFit says how many tokens the shortest conversation needs.
Environment: none.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Callable, Mapping, Sequence

from spec_route_suite.embedded import corpus
from spec_route_suite.routes.chat import render_chat_ids, render_chat_text
from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.routes.base import Completion, Request, TokenIds

# The corpus's own templates (kind -> drawer, statement, ack, question, reply): the model was trained on them.
FACTS = corpus._FACTS  # noqa: SLF001 - shared on purpose, see module docstring
CANARY_KINDS = ("pet", "name", "code", "number")  # value spaces large enough for unique values
SHARED_SYSTEM = "You are a helpful assistant."
SHARED_TURNS = (
    ("Good morning.", "Good morning to you too."),
    ("Can you help me?", "Of course, I am happy to help."),
    ("What day comes after Monday?", "Tuesday comes after Monday."),
    ("Is the sky blue?", "Yes, the sky is blue."),
)
FILLERS = (
    ("How are you today?", "I am fine, thank you."),
    ("Say hello.", "Hello!"),
    ("Name an animal.", "A horse is an animal."),
    ("What is the opposite of hot?", "The opposite of hot is cold."),
    ("Do you like music?", "Yes, music is nice."),
    ("Thanks!", "You are welcome."),
    ("What season is cold?", "Winter is cold."),
    ("Tell me a fruit.", "An apple is a fruit."),
)
LENGTHS = {"short": (0, 1), "medium": (2, 4), "long": (5, 8)}
TASK_SHAPES = ("math", "code", "json")
USER_SHAPE = "user"
USER_SHARE = 0.5   # of the pool, the user's prompts (when given) in the task slots
MAX_PROMPT_TOKENS = 400  # when the routes' context is unknown
TASK_DRAWS = 50  # task prompts drawn per item before a prompt room is declared too small for tasks
_RESERVED = {w.lower() for w in (*corpus.NAMES, *corpus.CITIES, *corpus.COLOURS, *corpus.OBJECTS, *corpus.ANIMALS)}


@dataclass(frozen=True)
class WorkItem:
    """One prompt of the workload. `canaries` are values no other item states; `answer` is checkable."""

    key: str
    shape: str
    length: str
    prompt_text: str
    prompt_ids: TokenIds
    answer: str
    canaries: tuple[str, ...] = ()
    messages: tuple[tuple[str, str], ...] | None = None
    asked: str = ""
    chat: bool = False   # sent as a chat request (its messages; the server applies its template)

    @property
    def checkable(self) -> bool:
        """Does `answer_correct` judge this item? Not a user prompt's (padding): its scorer needs the baseline."""
        return self.shape != USER_SHAPE

    def request(self, *, max_tokens: int, request_id: str | None = None, **overrides) -> Request:
        fields = {"temperature": 0.0, **({"messages": self.messages} if self.chat else {}), **overrides}
        return Request(prompt_ids=self.prompt_ids, max_tokens=max_tokens, request_id=request_id or f"ref-{self.key}",
                       **fields)


class WorkloadDoesNotFit(ValueError):
    """Even the shortest conversation (no shared turns, no fillers) or task prompt exceeds the prompt room."""

    def __init__(self, *, needed: int, room: int):
        super().__init__(f"the shortest canary prompt takes {needed} tokens, more than the {room} available")
        self.needed = needed
        self.room = room


@dataclass(frozen=True)
class Workload:
    """A pool of items with distinct canaries; `prefix_tokens` is the length of the shared chat prefix.

    `room` is the prompt budget it was built for, `shared_turns` how many SHARED_TURNS its prefix
    kept and `dropped_fillers` how many filler turns were left out so that every prompt fits."""

    items: tuple[WorkItem, ...]
    prefix_tokens: int
    seed: int
    room: int = MAX_PROMPT_TOKENS
    shared_turns: int = len(SHARED_TURNS)
    dropped_fillers: int = 0

    def __post_init__(self) -> None:
        owners: dict[str, str] = {}
        for item in self.items:
            for value in item.canaries:
                if value in owners:
                    raise ValueError(f"canary {value!r} shared by {owners[value]} and {item.key}")
                owners[value] = item.key

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(item.key for item in self.items)

    def get(self, key: str) -> WorkItem:
        return self._index[key]

    @cached_property
    def _index(self) -> dict[str, WorkItem]:
        return {item.key: item for item in self.items}

    def recall(self) -> tuple[WorkItem, ...]:
        return tuple(item for item in self.items if item.shape == "recall")

    def chats(self) -> tuple[WorkItem, ...]:
        return tuple(item for item in self.items if item.chat)

    def without(self, keys: set[str]) -> "Workload":
        """The pool less the items `keys` (conversations a server renders too long for its context)."""
        return replace(self, items=tuple(item for item in self.items if item.key not in keys))

    @property
    def cut(self) -> bool:
        """Did sizing shorten any conversation (fewer shared turns or filler turns left out)?"""
        return self.shared_turns < len(SHARED_TURNS) or self.dropped_fillers > 0

    def sizing(self) -> str:
        """How the pool was sized to its prompt room (a line for the report)."""
        lengths = [len(item.prompt_ids) for item in self.items]
        trimmed = []
        if self.shared_turns < len(SHARED_TURNS):
            trimmed.append(f"shared prefix cut to {self.shared_turns} of {len(SHARED_TURNS)} turns")
        if self.dropped_fillers:
            trimmed.append(f"{self.dropped_fillers} filler turns left out")
        return (f"{len(self.items)} prompts of {min(lengths, default=0)}-{max(lengths, default=0)} tokens for a room "
                f"of {self.room}" + (f" ({'; '.join(trimmed)})" if trimmed else ""))


def shared_prefix(nonce: str = "", turns: int = len(SHARED_TURNS)) -> list[tuple[str, str]]:
    """The long prefix every conversation starts with; a nonce makes a prefix no cache has seen."""
    system = SHARED_SYSTEM if not nonce else f"{SHARED_SYSTEM} Session {nonce}."
    messages = [("system", system)]
    for question, reply in SHARED_TURNS[:turns]:
        messages += [("user", question), ("assistant", reply)]
    return messages


def render(tokenizer, messages: Sequence[tuple[str, str]]) -> str:
    """The tokenizer's own chat template, with the generation prompt: the text a chat server would build."""
    return render_chat_text(tokenizer, messages)


def _canary_value(kind: str, rng: random.Random, taken: set[str]) -> tuple[str | None, str]:
    for _ in range(1000):
        subject, value = FACTS[kind][0](rng)
        if kind == "number" and int(value) < 100:
            continue  # 1-2 digit numbers occur in filler arithmetic and task answers
        if kind in ("pet", "name") and (len(value) < 4 or value.lower() in _RESERVED):
            continue
        if value not in taken:
            taken.add(value)
            return subject, value
    raise RuntimeError(f"could not draw a fresh {kind} canary")


def conversation(rng: random.Random, *, length: str, taken: set[str], nonce: str = "",
                 shared_turns: int = len(SHARED_TURNS)) -> tuple[list[tuple[str, str]], str, str, tuple[str, ...]]:
    """(messages, asked kind, answer, canaries): two facts with fresh values, fillers, then the question."""
    kinds = rng.sample(CANARY_KINDS, 2)
    asked = rng.choice(kinds)
    messages = shared_prefix(nonce, shared_turns)
    values: dict[str, tuple[str | None, str]] = {}
    for kind in kinds:
        values[kind] = _canary_value(kind, rng, taken)
        statement, ack = FACTS[kind][1], FACTS[kind][2]
        messages += [("user", statement.format(*values[kind])), ("assistant", ack.format(*values[kind]))]
    lo, hi = LENGTHS[length]
    for _ in range(rng.randint(lo, hi)):
        if rng.random() < 0.3:
            a, b = rng.randint(1, 9), rng.randint(1, 9)
            messages += [("user", f"What is {a} plus {b}?"), ("assistant", f"{a} plus {b} is {a + b}.")]
        else:
            messages += list(zip(("user", "assistant"), rng.choice(FILLERS)))
    messages.append(("user", FACTS[asked][3].format(*values[asked])))
    return messages, asked, values[asked][1], tuple(v for _, v in values.values())


def renderer(tokenizer) -> Callable[[Sequence[tuple[str, str]]], TokenIds]:
    """messages -> prompt token ids, through the tokenizer's chat template."""
    return lambda messages: render_chat_ids(tokenizer, messages)


class _ConversationTooLong(Exception):
    """A conversation without fillers does not fit: build again with a shorter shared prefix."""

    def __init__(self, tokens: int):
        self.tokens = tokens


def build_workload(tokenizer, *, size: int, seed: int = 0, task_share: float = 0.25,
                   max_prompt_tokens: int = MAX_PROMPT_TOKENS, nonce: str = "", chat_share: float = 0.0,
                   padding: Sequence[WorkItem] = ()) -> Workload:
    """`size` items: recall conversations of mixed lengths plus task prompts (math, code, json), each at most
    `max_prompt_tokens` long; the shared prefix shortens only as far as it must (WorkloadDoesNotFit past that).
    `chat_share` of the conversations (spread over every length) are chat items: multi-turn sessions sharing the
    prefix, sent as messages so the server's chat template builds their prompt. `padding` (the user's prompts,
    already sized) takes the task slots first, USER_SHARE of the pool, each prompt once."""
    shortest = max_prompt_tokens + 1
    if padding:
        task_share = max(task_share, USER_SHARE)
    for turns in range(len(SHARED_TURNS), -1, -1):
        try:
            return _build(tokenizer, size=size, seed=seed, task_share=task_share, room=max_prompt_tokens,
                          nonce=nonce, shared_turns=turns, chat_share=chat_share, padding=padding)
        except _ConversationTooLong as exc:
            shortest = exc.tokens
    raise WorkloadDoesNotFit(needed=shortest, room=max_prompt_tokens)


def _build(tokenizer, *, size: int, seed: int, task_share: float, room: int, nonce: str,
           shared_turns: int, chat_share: float = 0.0, padding: Sequence[WorkItem] = ()) -> Workload:
    rng = random.Random(f"canary-workload-{seed}")
    to_ids = renderer(tokenizer)
    probe_question = longest_question(tokenizer)
    fixed = len(shared_prefix(nonce, shared_turns)) + 4  # prefix and the two facts (statement + ack each)

    def fitting_ids(messages: list[tuple[str, str]]) -> TokenIds | None:
        """The prompt's ids when it fits, and would still fit with any other item's question (context probes)."""
        ids = to_ids(messages)
        if len(ids) > room or len(to_ids(messages[:-1] + [("user", probe_question)])) > room:
            return None
        return ids

    taken: set[str] = set()
    items: list[WorkItem] = []
    dropped = 0
    n_tasks = round(size * task_share)
    for index in range(size):
        if index < size - n_tasks:
            length = tuple(LENGTHS)[index % len(LENGTHS)]
            messages, asked, answer, canaries = conversation(rng, length=length, taken=taken, nonce=nonce,
                                                             shared_turns=shared_turns)
            while (ids := fitting_ids(messages)) is None:
                if len(messages) - 1 <= fixed:
                    raise _ConversationTooLong(len(to_ids(messages)))
                messages = messages[:-3] + messages[-1:]  # the last filler turn (user + assistant) goes
                dropped += 1
            chat = _is_chat(index, chat_share)
            items.append(WorkItem(key=f"{index:03d}-{'chat' if chat else 'recall'}-{asked}-{length}", shape="recall",
                                  length=length, prompt_text=render(tokenizer, messages), prompt_ids=ids,
                                  answer=answer, canaries=canaries, messages=tuple(messages), asked=asked, chat=chat))
        elif index - (size - n_tasks) < len(padding):
            user = padding[index - (size - n_tasks)]
            items.append(replace(user, key=f"{index:03d}-{USER_SHAPE}-{user.key}", shape=USER_SHAPE, length=USER_SHAPE))
        else:
            shape = TASK_SHAPES[index % len(TASK_SHAPES)]
            sample, ids = _task_prompt(tokenizer, shape, rng, room)
            items.append(WorkItem(key=f"{index:03d}-{shape}", shape=shape, length="task", prompt_text=sample.prompt,
                                  prompt_ids=ids, answer=sample.answer))
    shared = common_prefix([i.prompt_ids for i in items if i.shape == "recall"])
    return Workload(items=tuple(items), prefix_tokens=shared, seed=seed, room=room, shared_turns=shared_turns,
                    dropped_fillers=dropped)


def _is_chat(index: int, share: float) -> bool:
    """Every 1/share-th conversation, whole blocks of LENGTHS apart so each length gets chat items."""
    if share <= 0:
        return False
    block = index // len(LENGTHS)
    return int((block + 1) * share) > int(block * share)


def _task_prompt(tokenizer, shape: str, rng: random.Random, room: int):
    """A held-out corpus task of `shape` whose prompt fits `room` (drawn again when it does not)."""
    shortest = None
    for _ in range(TASK_DRAWS):
        sample = corpus.MAKERS[shape](rng, "heldout")
        ids = encode_prompt(tokenizer, sample.prompt)
        if len(ids) <= room:
            return sample, ids
        shortest = min(shortest or len(ids), len(ids))
    raise WorkloadDoesNotFit(needed=shortest, room=room)


def longest_question(tokenizer) -> str:
    """The canary question with the most tokens: any conversation may be asked it by a context probe."""
    questions = {FACTS[kind][3].format(animal, "") for kind in CANARY_KINDS for animal in corpus.ANIMALS}
    return max(sorted(questions), key=lambda q: len(encode_prompt(tokenizer, q)))


def common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix all sequences share (what a prefix cache can reuse)."""
    if not sequences:
        return 0
    n = min(len(s) for s in sequences)
    for i in range(n):
        if any(s[i] != sequences[0][i] for s in sequences):
            return i
    return n


def serial_references(generate: Callable[[Request], Completion], workload: Workload, *,
                      max_tokens: int) -> dict[str, Completion]:
    """Each item run alone, greedy: the outputs every concurrent run must reproduce."""
    return {item.key: generate(item.request(max_tokens=max_tokens)) for item in workload.items}


def mean_latency(references: Mapping[str, Completion]) -> float:
    """Mean serial latency: paces arrivals and sizes run deadlines."""
    values = [c.latency_s for c in references.values()]
    return max(1e-3, sum(values) / max(len(values), 1))


def mentions(text: str, value: str) -> bool:
    """`value` occurs in `text` as a whole word (so lucky number 123 is not found in 1234)."""
    return re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", text) is not None


def answer_correct(item: WorkItem, text: str) -> bool:
    """Is the item's checkable answer in the output? Recall: the fact; math: the result; code/json: the body."""
    text = text.split(corpus.EOS)[0]
    if item.shape == "recall":
        return mentions(text, item.answer)
    if item.shape == "math":
        match = re.search(r"The answer is (-?\d+)", text)
        return match is not None and match.group(1) == item.answer
    return text.strip().startswith(item.answer.strip())


def canary_question(item: WorkItem, value: str) -> str | None:
    """The question whose answer states `value`, for the conversation that states it (None if it states none).

    Why: asked inside *another* conversation, it shows whether that conversation's own context makes the
    model say `value` too (a favourite guess), in which case `value` in its output names no source."""
    for role, text in item.messages or ():
        for kind in CANARY_KINDS:
            statement, question = FACTS[kind][1], FACTS[kind][3]
            pattern = re.escape(statement).replace(re.escape("{0}"), "(?P<subject>.+?)").replace(
                re.escape("{1}"), re.escape(value))
            found = re.fullmatch(pattern, text) if role == "user" else None
            if found:
                return question.format(found.groupdict().get("subject"), value)
    return None


def canary_owners(workload: Workload) -> Mapping[str, str]:
    """canary value -> the key of the only item that states it."""
    return {value: item.key for item in workload.items for value in item.canaries}


def fitting_chats(workload, handles, context_fit, max_tokens: int) -> tuple[object, dict[str, str]]:
    """The workload less its chat conversations that a server renders too long for the pair's context (its
    template may be longer than ours), and why each was left out."""
    too_long: dict[str, str] = {}
    for item in workload.chats():
        req = item.request(max_tokens=max_tokens, request_id=f"len-{item.key}")
        for handle in handles:
            rendered = handle.prompt_tokens(req)
            if rendered is not None and not context_fit.fits(rendered, max_tokens):
                too_long[item.key] = f"{rendered} tokens on '{handle.name}'"
                break
    return (workload.without(set(too_long)) if too_long else workload), too_long
