"""Greedy equivalence: at temperature 0 the candidate must emit the baseline's tokens, prompt by prompt.

Each answer pair is judged by equivalence/greedy_judge.py; every first divergence is classified
(equivalence/divergence.py): the candidate's token is
teacher-forced through the baseline and its margin to the baseline's top-1 is compared
with tau from the A/A calibration (equivalence/calibration.py).

Policy (--greedy-policy):
- strict (default): any divergence fails, whatever its class; the finding still says
  whether it looked like a near-tie. Right for the embedded pair and for any engine run
  in a batch-invariant mode (vLLM VLLM_BATCH_INVARIANT=1, SGLang
  --enable-deterministic-inference, llama.cpp on one slot), where the numbers must match.
- classify: near-ties become "near-tie" findings and do not fail; bugs (margin above tau,
  token outside the baseline's top-k, length/finish differences, unclassifiable splits)
  still fail. Use it on real GPU hardware without batch invariance, where even the
  baseline disagrees with itself across batch compositions (Thinking Machines: 80
  distinct greedy outputs of 1000; vLLM's own test accepts 66% exact). Calibrate on the
  same hardware and engine build, and read the near-tie rate test below: a candidate
  that splits at near-ties far more often than the baseline does against itself runs its
  verifier at a different precision.

The chat shape (`test_chat_greedy_matches_baseline`, check family "chat", equivalence/chat.py) sends a
few chat prompts as messages to both routes and judges them the same way; a multi-turn prompt (MT-Bench)
is judged turn by turn, each later turn asked after the baseline's answer to the one before.

A prompt from the user's sources is sent with its own max_tokens and stop strings; every judged prompt
leaves a `class_outcome` measurement (its source, category and outcome) for the report's per-class table, and a
`greedy_answer` one (the answer's ids and its own drafting counters: equivalence/greedy.py answer_record) that a
later run's --compare-to compares with its own, prompt by prompt (reports/regression.py).

A server that returns no token ids is compared at text level (spec_route_suite/routes/textlevel.py):
both outputs re-tokenized from their text, the finding and a "comparison" measurement saying so.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence import chat
from spec_route_suite.equivalence.greedy_judge import greedy_request, judge_greedy
from spec_route_suite.equivalence.near_tie_rate import (COULD_DETECT, Exposure, RateVerdict, excess_finding,
                                                        record_rates)
from spec_route_suite.prompts.prompt_set import run_prompts

pytestmark = pytest.mark.check("greedy")


def test_greedy_matches_baseline(prompt, baseline, candidate, tokenizer, fitted_prompts, suite_config, calibration,
                                 eos_token_id, findings):
    req = greedy_request(prompt, fitted_prompts)
    judge_greedy(req, prompt, baseline.generate(req), candidate.generate(req), baseline=baseline, candidate=candidate,
                 tokenizer=tokenizer, suite_config=suite_config, calibration=calibration,
                 eos_token_id=eos_token_id, findings=findings)


@pytest.mark.check(chat.CHECK)
def test_chat_greedy_matches_baseline(chat_prompt, baseline, candidate, tokenizer, fitted_prompts, suite_config,
                                      calibration, eos_token_id, findings):
    """The chat shape: the prompt's messages to both routes (each applies its chat template), same judgement;
    each later turn of a multi-turn prompt follows the baseline's answer to the turn before."""
    chat.skip_without_chat(findings, candidate, baseline, candidate)
    record = chat_prompt
    for turn in range(len(chat_prompt.followups) + 1):
        if turn:
            record = chat.next_turn(chat_prompt, record, answer=expected.text, turn=turn)
        with chat.chat_path(findings, candidate):
            req = chat.chat_shape(record, tokenizer, fitted_prompts, max_tokens=fitted_prompts.max_tokens_for(record),
                                  request_id=f"chat-greedy-{record.id}", routes=(baseline, candidate))
            expected, actual = baseline.generate(req), candidate.generate(req)
        judge_greedy(req, record, expected, actual, baseline=baseline, candidate=candidate, tokenizer=tokenizer,
                     suite_config=suite_config, calibration=calibration, eos_token_id=eos_token_id,
                     findings=findings, check=chat.CHECK)


@pytest.mark.check("near-tie")
def test_near_tie_rate_matches_aa(baseline, candidate, fitted_prompts, suite_config, calibration, findings):
    """Near-tie flips per token on the candidate's greedy answers vs the baseline's own (equivalence/near_tie_rate.py).

    Every greedy prompt of the run, the greedy check's own requests (memoised on the worker, so its work is
    reused): each answer of both routes is teacher-forced through the baseline, every position compared. The
    family is verified only when this exposure sees the excess it claims (the coverage row says what it could see).
    Under --greedy-policy classify an excess is a bug: the greedy checks excuse every near-tie one by one, so their
    rate is the only sign left. Under strict it is a warning (every split already fails there).
    """
    aa_calibration = calibration.get()
    if not baseline.capabilities.prompt_logprobs:
        findings.cover("near-tie", candidate.name, verified=False, could_detect=COULD_DETECT,
                       reason=f"baseline '{baseline.name}' cannot teacher-force (no prompt_logprobs): flips per token "
                              f"cannot be counted")
        pytest.skip(f"not verified: baseline '{baseline.name}' cannot teacher-force, so near-tie flips per token "
                    f"cannot be counted")
    exposure_ = Exposure()
    for prompt in run_prompts(suite_config):
        req = greedy_request(prompt, fitted_prompts)
        exposure_.add(baseline, req, baseline.generate(req), candidate.generate(req), tau=aa_calibration.tau)
    rates = RateVerdict.of(candidate=exposure_.candidate, aa=exposure_.aa, alpha=suite_config.alpha)
    record_rates(findings, rates, exposure_, calibration=aa_calibration, baseline=baseline.name,
                 candidate=candidate.name)
    finding = excess_finding(rates, exposure_, calibration=aa_calibration, policy=suite_config.greedy_policy,
                             baseline=baseline, candidate=candidate)
    if finding is None:
        return
    findings.add(finding)
    # under classify the greedy checks excuse near-ties, so an excess of them is the only sign left: it fails
    if finding.severity == "bug":
        pytest.fail(f"{finding.title} (--greedy-policy classify)", pytrace=False)
