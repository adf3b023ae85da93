"""Fast, model-free stand-ins for the stressor self-tests, and tests that the stand-ins behave.

Why: the detector, driver and shrinker must be tested on ground truth that is cheap and
exact. A character tokenizer plus an "oracle" route that answers recall questions by
reading its own prompt behave like a perfect tiny model: run alone, each conversation
gets its own fact back. `MixingRoute` wraps any route and, while other requests are in
flight, answers a request's last user message in another in-flight request's context,
the reported SGLang failure; its `fault_log` is the ground truth (victim, source).
"""
from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import replace

from spec_route_suite.embedded import corpus
from spec_route_suite.routes.base import (AcceptanceSnapshot, Capabilities, Completion, Request, Route, RouteInventory,
                                         RouteWrapper)

SPECIALS = ("<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>")
EOS_ID, USER_ID = 2, 4
OFFSET = len(SPECIALS)
_SPECIAL_RE = re.compile("|".join(re.escape(s) for s in SPECIALS))


class CharTokenizer:
    """One token per character, specials as single ids; speaks the tokenizer API the stressors use."""

    eos_token_id = EOS_ID
    pad_token_id = 0
    chat_template = "corpus.render_chat"  # present, so the stressors take the template path

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        ids, at = [], 0
        for match in _SPECIAL_RE.finditer(text):
            ids += [OFFSET + ord(c) for c in text[at:match.start()]]
            ids.append(SPECIALS.index(match.group()))
            at = match.end()
        ids += [OFFSET + ord(c) for c in text[at:]]
        return {"input_ids": ids}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join((("" if skip_special_tokens else SPECIALS[i]) if i < OFFSET else chr(i - OFFSET)) for i in ids)

    def apply_chat_template(self, messages, tokenize: bool = False, add_generation_prompt: bool = True):
        text = corpus.render_chat([(m["role"], m["content"]) for m in messages], add_generation_prompt)
        return self(text)["input_ids"] if tokenize else text


def oracle_answer(prompt: str) -> str:
    """What a perfect recall model says: the asked fact looked up in this prompt's own context."""
    if corpus.USER not in prompt:
        return f"ok {sum(map(ord, prompt)) % 997}."  # task prompts: a deterministic function of the prompt
    context, _, last = prompt.rpartition(corpus.USER)
    question = last.strip().split("\n")[0]
    for kind, (_, statement, _, ask, reply) in corpus._FACTS.items():  # noqa: SLF001
        pattern = re.escape(ask).replace(r"\{0\}", r"(\w+)").replace(r"\{1\}", r"(\S+)")
        asked = re.fullmatch(pattern, question)
        if asked is None:
            continue
        subject = asked.group(1) if "{0}" in ask else None
        stated = re.escape(statement).replace(r"\{0\}", re.escape(subject) if subject else r"(\w+)")
        found = re.findall(stated.replace(r"\{1\}", r"([^\s.]+)"), context)
        if found:
            return reply.format(subject, found[-1])
        return "I do not know."
    return "I do not know."


class OracleRoute(Route):
    """A correct, batch-invariant, deterministic route; latency grows with prompt length so requests overlap."""

    def __init__(self, *, name: str = "oracle", latency_s: float = 0.004, stream: bool = True):
        self.name = name
        self.tokenizer = CharTokenizer()
        self.latency_s = latency_s
        self.capabilities = Capabilities(token_ids=True, stream=stream, seed=True, concurrency=True)
        self.calls = 0
        self.cancelled = 0
        self.alive = True

    async def generate(self, req: Request) -> Completion:
        self.calls += 1
        start = time.perf_counter()
        try:
            await asyncio.sleep(self.latency_s * (1 + len(req.prompt_ids) / 200))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        prompt = self.tokenizer.decode(req.prompt_ids)
        text = oracle_answer(prompt)
        if not req.greedy:
            rng = random.Random(f"{req.seed}-{prompt}" if req.seed is not None else None)
            text += " " + " ".join(rng.choice(("yes", "no", "maybe")) for _ in range(4))
        ids = self.tokenizer(text)["input_ids"] + [EOS_ID]
        ids = ids[:req.max_tokens]
        finish = "stop" if ids and ids[-1] == EOS_ID else "length"
        return Completion(token_ids=tuple(ids), text=self.tokenizer.decode(ids, skip_special_tokens=True),
                          finish_reason=finish, route=self.name, usage_completion_tokens=len(ids),
                          latency_s=time.perf_counter() - start)

    async def score(self, prompt_ids, continuation_ids, top_k):
        raise NotImplementedError

    async def inventory(self) -> RouteInventory:
        return RouteInventory(engine="oracle")

    async def acceptance(self) -> AcceptanceSnapshot | None:
        return None

    async def health(self) -> bool:
        return self.alive

    async def aclose(self) -> None:
        return None


def splice(victim: tuple[int, ...], source: tuple[int, ...]) -> tuple[int, ...]:
    """The victim's last user turn in the source's conversation; the source's prompt when either has no user turn."""
    if USER_ID in victim and USER_ID in source:
        v = len(victim) - 1 - victim[::-1].index(USER_ID)
        s = len(source) - 1 - source[::-1].index(USER_ID)
        return source[:s] + victim[v:]
    return source


class MixingRoute(RouteWrapper):
    """Wraps a route; a request arriving while others are in flight is, at `rate`, answered in another's context.

    `pick="first"` with rate 1.0 is deterministic (the oldest in-flight request is the source),
    which is what the shrinking self-tests need.
    """

    def __init__(self, inner, *, rate: float, seed: int = 0, pick: str = "random"):
        super().__init__(inner)
        self.rate = rate
        self.pick = pick
        self.rng = random.Random(seed)
        self.in_flight: dict[str, Request] = {}
        self.fault_log: list[tuple[str, str]] = []

    async def generate(self, req: Request) -> Completion:
        others = list(self.in_flight.values())
        self.in_flight[req.request_id] = req
        try:
            if others and self.rng.random() < self.rate:
                source = others[0] if self.pick == "first" else self.rng.choice(others)
                mixed = splice(req.prompt_ids, source.prompt_ids)
                if mixed != req.prompt_ids:
                    self.fault_log.append((req.request_id, source.request_id))
                    req = replace(req, prompt_ids=mixed)
            return await self.inner.generate(req)
        finally:
            self.in_flight.pop(req.request_id, None)


def oracle_route() -> OracleRoute:
    """Factory for replay scripts: the correct stand-in."""
    return OracleRoute()


def mixing_oracle_route() -> MixingRoute:
    """Factory for replay scripts: mixes every request that arrives while another is in flight."""
    return MixingRoute(OracleRoute(), rate=1.0, pick="first")


# ---------------------------------------------------------------- the stand-ins' own tests
def test_char_tokenizer_round_trips_chat_template():
    tok = CharTokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    ids = tok(text)["input_ids"]
    assert ids[0] == 1 and USER_ID in ids
    assert tok.decode(ids) == text


def test_oracle_answers_from_its_own_context_only():
    msgs = [("user", "My locker code is K7-42."), ("assistant", "I will remember K7-42."),
            ("user", "What is my locker code?")]
    assert oracle_answer(corpus.render_chat(msgs, True)) == "Your locker code is K7-42."
    msgs = [("user", "My cat is called Bala."), ("assistant", "Nice, Bala is a lovely name."),
            ("user", "What is my cat called?")]
    assert oracle_answer(corpus.render_chat(msgs, True)) == "Your cat is called Bala."
    assert oracle_answer(corpus.render_chat(msgs[:2] + [("user", "What is my dog called?")], True)) == "I do not know."


def test_splice_puts_victim_question_in_source_context():
    tok = CharTokenizer()
    def ids(*turns):
        return tuple(tok(corpus.render_chat(list(zip(("user", "assistant", "user"), turns)), True))["input_ids"])
    a = ids("My name is Abo.", "ok", "What is my name?")
    b = ids("My name is Zed.", "ok", "Say hello.")
    mixed = tok.decode(splice(a, b))
    assert "Zed" in mixed and "Abo" not in mixed and mixed.endswith("What is my name?\n<|assistant|>\n")
