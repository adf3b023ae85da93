"""Task scorers for the user's prompts: is this answer right?

Why: "GSM8K 95.7% -> 1.1% with MTP" (vllm#46834) and "93% -> 62%" (llama.cpp#27975) were seen as task
accuracy, the number a maintainer compares. Each prompt record names its scorer (spec_route_suite/prompts/loaders.py):
- number (GSM8K, a numeric answer): the answer's final number, read as lm-eval reads GSM8K (`#### N`, then
  "The answer is N", then the last number in the text), equal to the gold number;
- contains (a text answer): the gold answer appears in the output as a whole word;
- parity (MT-Bench turns, prompts without an answer): there is no judge model, so the answer must be the
  baseline's own, token for token (a near-tie under --greedy-policy classify counts as equal);
- code (HumanEval, MBPP): the code answer (a fenced block, or the prompt plus its continuation) equal to the
  baseline's; with execute=true on the source, the record's tests run on it instead (stressors/tasks/code_exec.py).
Environment: none.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from spec_route_suite.prompts.encode import STORED_BOS
from spec_route_suite.prompts.loaders import CODE, CONTAINS, NUMBER, PARITY, gsm8k_final_answer
from spec_route_suite.stressors.canary import mentions

__all__ = ["CODE", "CONTAINS", "NUMBER", "PARITY", "final_number", "gold_right", "same_answer", "code_of"]
_ANSWER_IS = re.compile(r"[Tt]he (?:final )?answer is:?\s*\$?(-?[\d,]*\.?\d+)")
_NUMBER = re.compile(r"-?\d[\d,]*\.?\d*|-?\.\d+")
_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.S)
_EOS_TEXTS = ("</s>", "<|endoftext|>", "<|eot_id|>", "<|im_end|>")


def final_number(text: str) -> str | None:
    """The answer's final number: `#### N`, "The answer is N", else the last number in the text."""
    marked = gsm8k_final_answer(text)
    if marked is not None:
        return marked
    found = _ANSWER_IS.findall(text)
    if found:
        return _clean(found[-1])
    numbers = _NUMBER.findall(text)
    return _clean(numbers[-1]) if numbers else None


def _clean(number: str) -> str:
    return number.replace(",", "").rstrip(".")


def same_number(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    try:
        return Decimal(_clean(a)) == Decimal(_clean(b))
    except InvalidOperation:
        return False


def answer_text(text: str) -> str:
    """The output up to an end-of-text marker a server left in the text."""
    for marker in _EOS_TEXTS:
        text = text.split(marker)[0]
    return text


def code_of(record, text: str) -> str:
    """The code an answer gives: its first fenced block, else (a prompt that is code to continue) the prompt and
    its continuation, else the whole answer; trailing spaces dropped."""
    text = answer_text(text)
    fenced = _FENCE.search(text)
    if fenced:
        code = fenced.group(1)
    elif record.messages is None:
        code = record.text.removeprefix(STORED_BOS) + text
    else:
        code = text
    return "\n".join(line.rstrip() for line in code.strip("\n").splitlines())


def gold_right(record, text: str) -> bool | None:
    """Right or wrong against the record's own answer (number, contains); None for a scorer that needs the
    baseline's answer (parity, code without execution)."""
    text = answer_text(text)
    if record.scorer == NUMBER:
        return same_number(final_number(text), record.answer)
    if record.scorer == CONTAINS:
        return mentions(text, record.answer)
    return None


def needs_reference(record, *, execute: bool) -> bool:
    """Does the scorer judge against the baseline's answer (parity, code parity)?"""
    return record.scorer == PARITY or (record.scorer == CODE and not execute)


def same_answer(record, expected, got) -> bool:
    """Parity of two answers: token for token, or, for code, the same code."""
    if record.scorer == CODE:
        return code_of(record, expected.text) == code_of(record, got.text)
    return tuple(expected.token_ids) == tuple(got.token_ids) and expected.text == got.text
