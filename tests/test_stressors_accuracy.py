"""Self-tests of accuracy under load: the report sentence, Fisher's exact test, and flips found with their source."""
from __future__ import annotations

import asyncio
import random
from math import comb

import pytest

from spec_route_suite.stressors.accuracy.tally import Tally, fisher_p, flips, sentence, tally
from spec_route_suite.stressors.canary import WorkItem, answer_correct, build_workload, mentions, serial_references
from spec_route_suite.stressors.driver import burst, drive, plan, round_robin
from test_stressors_fakes import CharTokenizer, MixingRoute, OracleRoute


def test_fisher_matches_the_hypergeometric_tail_of_the_motivating_report():
    load, serial = Tally("at c=8", 7, 100), Tally("serial", 0, 100)
    assert fisher_p(load, serial) == pytest.approx(comb(100, 7) / comb(200, 7), rel=1e-9)
    assert fisher_p(load, serial) < 0.01
    assert fisher_p(Tally("at c=8", 1, 100), serial) == pytest.approx(0.5)
    text = sentence(loaded=[load], serial=serial, baseline=Tally("on the baseline", 0, 304))
    assert text == ("7 wrong of 100 at c=8 (Fisher p=0.00701 vs serial), 0 wrong of 100 serial, "
                    "0 wrong of 304 on the baseline")


def item(shape, answer):
    return WorkItem(key="k", shape=shape, length="task", prompt_text="", prompt_ids=(1,), answer=answer)


@pytest.mark.parametrize("shape, answer, text, right", [
    ("recall", "K7-42", "Your locker code is K7-42.", True),
    ("recall", "K7-42", "Your locker code is K7-421.", False),
    ("recall", "123", "Your lucky number is 1234.", False),
    ("math", "12", " 5 + 7 = 12. The answer is 12.", True),
    ("math", "12", " 5 + 7 = 12. The answer is 11.", False),
    ("code", "    return a + b\n", "    return a + b\n</s>", True),
    ("code", "    return a + b\n", "    return a - b\n", False),
    ("json", '{"a": 1}', ' {"a": 1}', True),
])
def test_answer_checks(shape, answer, text, right):
    assert answer_correct(item(shape, answer), text) is right


def test_mentions_is_word_bounded():
    assert mentions("is Bala.", "Bala") and not mentions("is Balamo.", "Bala") and not mentions("K7-421", "K7-42")


@pytest.mark.parametrize("rate, expect_flips", [(0.0, False), (0.2, True)])
def test_flips_are_found_and_attributed(rate, expect_flips):
    tok = CharTokenizer()
    workload = build_workload(tok, size=16, seed=11, task_share=0.0, max_prompt_tokens=10_000)
    oracle = OracleRoute(latency_s=0.003)
    refs = serial_references(lambda r: asyncio.run(oracle.generate(r)), workload, max_tokens=64)
    route = MixingRoute(oracle, rate=rate, seed=2)
    keys = round_robin(workload.keys, 160, rng=random.Random(0))
    subs = plan(((k, workload.get(k).request(max_tokens=64)) for k in keys), offsets=burst(len(keys)), tag="acc")
    run = asyncio.run(drive(route, subs, concurrency=8, request_timeout_s=5, deadline_s=60))
    serial = tally("serial", workload, ((k, c.text) for k, c in refs.items()))
    loaded = tally("at c=8", workload, ((o.key, o.completion.text) for o in run.completed))
    found = flips(workload=workload, serial=refs, outcomes=run.outcomes, references=refs)
    assert serial.wrong == 0
    assert bool(found) is expect_flips and loaded.wrong == len(found)
    truth = dict(route.fault_log)
    for flip in found:
        assert flip.request_id in truth, flip.line()
        if flip.attribution.attributed:
            assert flip.attribution.source_key == run.by_id()[truth[flip.request_id]].key, flip.line()
