"""Task scorers and task accuracy under load, proven through a user's prompts (generated GSM8K, MT-Bench and a
traffic file in their real layouts): the correct engine's answers score as the baseline's and none flips under
load; a planted mixing fault (answers continuing another request's prompt under load) flips right answers, and
a planted greedy divergence breaks MT-Bench turn parity, at the same budget. Code execution (off by default)
passes a right program, fails a wrong one and stops a hung one."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from spec_route_suite.prompts.fit import ContextFit, FittedPrompts, RouteContext
from spec_route_suite.prompts.loaders import load
from spec_route_suite.prompts.records import PromptRecord
from spec_route_suite.prompts.samples import write_samples
from spec_route_suite.routes.base import Completion
from spec_route_suite.tokenizers import load_tokenizer
from spec_route_suite.routes.loop import BackgroundLoop
from spec_route_suite.routes.wrappers.planted import PlantedDivergenceRoute, parse_plant
from spec_route_suite.routes.spec import parse_route_uri
from spec_route_suite.session import RouteHandle
from spec_route_suite.stressors.tasks.code_exec import passes
from spec_route_suite.stressors.driver import burst, drive_handle, plan
from spec_route_suite.stressors.tasks.scorers import code_of, final_number, gold_right, same_answer
from spec_route_suite.stressors.tasks.accuracy import Judge, task_flips, task_items, tally

ROOT = Path(__file__).resolve().parent.parent
MAX_TOKENS = 32
LOAD_CONCURRENCY = 8


@pytest.mark.parametrize("text, number", [
    (" 3 + 4 = 7. The answer is 7.", "7"), ("so #### 1,200", "1200"), ("I got 5, then 12.", "12"),
    ("The final answer is: $-3.50.", "-3.50"), ("no digits", None),
])
def test_final_number_reads_as_lm_eval_does(text, number):
    assert final_number(text) == number


def record(**fields) -> PromptRecord:
    return PromptRecord(**{"id": "x", "category": "c", "text": "<s>def f(a):", **fields})


def answer(text: str, ids=(1, 2)) -> Completion:
    return Completion(token_ids=tuple(ids), text=text, finish_reason="stop", route="r")


def test_scorers_judge_gold_answers_and_code():
    assert gold_right(record(scorer="number", answer="2,400"), "It is 2400.</s>")
    assert not gold_right(record(scorer="number", answer="24"), "It is 2400.")
    assert gold_right(record(scorer="contains", answer="K7-42"), "Your code is K7-42.")
    assert not gold_right(record(scorer="contains", answer="K7-42"), "Your code is K7-421.")
    assert gold_right(record(scorer="parity"), "anything") is None
    continuation = record(scorer="code")
    assert code_of(continuation, "\n    return a  \n") == "def f(a):\n    return a"
    chat = record(scorer="code", messages=(("user", "write f"),))
    fenced = "Here:\n```python\ndef f(a):\n    return a\n```\nDone."
    assert code_of(chat, fenced) == "def f(a):\n    return a"
    assert same_answer(chat, answer(fenced, (1,)), answer(fenced.replace("Done.", "Enjoy!"), (2,))), \
        "code parity compares the code, not the chatter around it"
    assert not same_answer(record(scorer="parity"), answer("a", (1,)), answer("a", (2,)))


def test_code_execution_runs_tests_in_a_contained_child():
    tests = "assert f(2) == 4\n"
    assert passes("def f(a):\n    return a * 2", tests) == (True, "")
    ok, why = passes("def f(a):\n    return a + 3", tests)
    assert not ok and "AssertionError" in why
    ok, why = passes("while True:\n    pass", tests, timeout_s=1.0)
    assert not ok and "timed out" in why


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    from spec_route_suite.reference.route import ReferenceRoute, load_model
    torch.set_num_threads(1)
    paths = write_samples(tmp_path_factory.mktemp("samples"), per_set=8)
    records = (load("gsm8k", paths["gsm8k"])[:4] + load("mt_bench", paths["mt_bench"])[:2]
               + load("jsonl", paths["jsonl"])[:4])
    loop = BackgroundLoop()
    spec = parse_route_uri("baseline", "reference:", base=ROOT)
    models = (load_model(spec.model), load_model(spec.draft))
    fitted = FittedPrompts(load_tokenizer(spec.tokenizer), ContextFit((RouteContext("r", 512, "test"),)),
                           max_tokens=MAX_TOKENS)

    def handle(name: str, query: str = "") -> RouteHandle:
        s = parse_route_uri(name, "reference:" + (f"?{query}" if query else ""), base=ROOT)
        route = ReferenceRoute(s, models=models)
        plant = parse_plant(s)
        if plant is not None:   # as build_route wraps it, on the shared models
            route = PlantedDivergenceRoute(route, plant[1], route.tokenizer.vocab_size)
        return RouteHandle(route, s, loop, timeout_s=120.0)
    baseline = handle("baseline")
    items = task_items(records, fitted, baseline_answer=lambda item: baseline.generate(item.request))
    yield SimpleNamespace(handle=handle, baseline=baseline, items=items,
                          references={i.key: baseline.generate(i.request) for i in items})
    loop.close()


def run_candidate(bench, name: str, query: str, *, loaded: bool = True):
    """Serial answers, one load run at c=8 with every item twice, and the judge's view of both: one budget."""
    candidate = bench.handle(name, query)
    items = {i.key: i for i in bench.items}
    judge = Judge(references=bench.references, executes=frozenset(), near_tie=lambda item, expected, got: False)
    serial = {i.key: candidate.generate(i.request) for i in bench.items}
    if not loaded:
        return SimpleNamespace(serial=tally("serial", judge, items, serial.items()))
    subs = plan(((i.key, i.request) for i in bench.items * 2), offsets=burst(2 * len(bench.items)), tag=name)
    run = drive_handle(candidate, subs, concurrency=LOAD_CONCURRENCY, mean_latency_s=0.05)
    return SimpleNamespace(serial=tally("serial", judge, items, serial.items()),
                           flips=task_flips(judge, items, serial, run.outcomes), ok=len(run.completed))


def test_correct_engine_keeps_its_answers_and_faults_are_caught_through_the_users_prompts(bench):
    keys = [i.key for i in bench.items]
    assert "mt_bench-81-turn2" in keys and keys.index("mt_bench-81-turn2") == keys.index("mt_bench-81") + 1
    turn2 = next(i for i in bench.items if i.key == "mt_bench-81-turn2")
    assert turn2.record.messages[1] == ("assistant", bench.references["mt_bench-81"].text), \
        "turn 2 follows the baseline's own answer to turn 1"
    correct = run_candidate(bench, "correct", "")
    assert correct.ok == 2 * len(keys) and correct.flips == []
    parity = [k for k in keys if next(i for i in bench.items if i.key == k).record.scorer == "parity"]
    assert not set(parity) & set(correct.serial.wrong_keys), "the correct engine's answers are the baseline's"
    mixing = run_candidate(bench, "mixing", "fault=cross_context_mixing&mix_rate=0.5&mix_mode=prompt")
    assert mixing.serial.wrong == correct.serial.wrong, "alone, the mixing engine answers right"
    assert mixing.flips, "under load, answers continuing another request's prompt turn wrong"
    diverged = run_candidate(bench, "diverged", "plant=divergence@2", loaded=False)
    assert set(parity) <= set(diverged.serial.wrong_keys), "MT-Bench turn parity and traffic parity fail"


def test_without_the_users_prompts_task_accuracy_is_not_run_never_not_applicable():
    """Issue #34 item 4: no --prompts is the run's choice, not the engine's statement: "not verified (not run: no
    --prompts)", skipped, never "not applicable"."""
    import spec_route_suite.stressors.test_task_accuracy as task_suite
    from tests.test_greedy_routes import Sink, suite_config
    sink, route = Sink(), SimpleNamespace(name="candidate")
    with pytest.raises(pytest.skip.Exception, match="not run: no --prompts"):
        task_suite.test_task_accuracy_serial_and_under_load(candidate=route, baseline=route, tokenizer=None,
                                                            suite_config=suite_config(), findings=sink, request=None)
    (record,) = [data for kind, data in sink.measurements if kind == "coverage"]
    assert record["verified"] is False and record.get("applicable", True) is True, record
