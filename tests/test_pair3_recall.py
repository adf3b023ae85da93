"""The committed third-pair target copies facts from its context, as the stressors' canary conversations need.

The flagship check (stressors/accuracy/reported_protocol.py, accuracy under load) can only see answers turn wrong under
load when the target answers them right alone. These pin the committed target's canary recall on 20 chat
conversations of two workload seeds (spec_route_suite/training/canary_recall.py: the canary workload, the tokenizer's own
chat template, greedy, 48 new tokens, the content after `</think>` scored), at the level the recall stage of
train_pair3.py reached (fixtures/models/pair3/target/training.json), and check that the measurement can fail:
the same model with its attention outputs zeroed (it can no longer look back at the fact) answers from memory.
A few seconds on one core.
"""
from __future__ import annotations

import copy

import pytest
import torch

from spec_route_suite.training.canary_recall import canary_recall
from spec_route_suite.training.evaluate import load_target
from spec_route_suite.training.train_pair3 import PAIR3_DIR

N = 20
# right answers of 20 per workload seed measured on the committed target (one answer of slack for another
# machine's floating-point summation order)
PINNED = {0: 20, 1: 20}
SLACK = 1


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    tok, model = load_target(PAIR3_DIR / "target")
    return model, tok


@pytest.mark.parametrize("seed", sorted(PINNED))
def test_committed_target_answers_canary_recall(target, seed):
    model, tok = target
    result = canary_recall(model, tok, n=N, seed=seed)
    assert result.closed_thoughts == N, "every answer closes its reasoning with </think>"
    assert result.right >= PINNED[seed] - SLACK, (
        f"canary recall {result.right}/{N} on workload seed {seed} (pinned {PINNED[seed]}); wrong: {result.wrong}")


def test_a_target_that_cannot_look_back_fails_the_measurement(target):
    """Negative control: without attention outputs the model cannot copy, and the measurement says so."""
    model, tok = target
    blind = copy.deepcopy(model)
    with torch.no_grad():
        for layer in blind.model.layers:
            layer.self_attn.o_proj.weight.zero_()
    result = canary_recall(blind, tok, n=N, seed=0)
    assert result.right < PINNED[0] - SLACK


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_recall_sessions_ask_a_fact_stated_far_back_and_keep_the_split(split):
    """The recall stage's long sessions: the asked value is stated in the conversation, answered in the completion,
    and its key stays in the split asked for (held-out facts never reach training)."""
    import random

    from spec_route_suite.embedded.chatml_corpus import make_recall_session
    from spec_route_suite.embedded.corpus import split_of

    rng = random.Random(7)
    for _ in range(50):
        sample = make_recall_session(rng, split)
        assert split_of(sample.key) == split
        stated = [content for role, content in sample.messages if role == "user"][:-1]
        assert any(sample.answer in content for content in stated), sample.messages
        assert sample.answer not in sample.messages[-1][1], "the question does not give the value away"
        assert sample.completion.rstrip().endswith("<|im_end|>") and sample.answer in sample.completion


def test_echo_chats_answer_with_the_values_of_their_last_message():
    """Every token of an echo answer after the thought is a copy of the last user message's values."""
    import random

    from spec_route_suite.embedded.chatml_corpus import make_echo

    rng = random.Random(3)
    for _ in range(50):
        sample = make_echo(rng)
        last_user = sample.prompt.rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>")[0]
        assert last_user.endswith(sample.answer)
        assert sample.completion.split("</think>")[-1].strip() == sample.answer + "<|im_end|>"
