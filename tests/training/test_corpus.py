"""The tiny-model corpus: deterministic from its seed, held-out text disjoint from training,
and every templated sample internally correct (arithmetic right, summaries copied verbatim)."""

from __future__ import annotations

import json
import re

import pytest

from tripath.core.data_dirs import MODELS_DIR
from tripath.core.errors import InputError
from tripath.training.corpus import (
    TASKS,
    CorpusConfig,
    build_corpus,
    code_chunks,
    is_heldout_key,
    load_eval_prompts,
    write_eval_prompts,
)
from tripath.training.corpus_tasks import Sample, entity_split

SHIPPED = MODELS_DIR / "eval_prompts.jsonl"


@pytest.fixture(scope="module")
def corpus():
    """The corpus exactly as train.py builds it by default (seed 0)."""
    return build_corpus(CorpusConfig())


@pytest.fixture(scope="module")
def shipped() -> list[Sample]:
    return load_eval_prompts(SHIPPED)


def test_same_seed_same_corpus_other_seed_differs() -> None:
    small = dict(train_bytes_per_task=20_000, heldout_samples_per_task=6)
    a, b = build_corpus(CorpusConfig(seed=3, **small)), build_corpus(CorpusConfig(seed=3, **small))
    c = build_corpus(CorpusConfig(seed=4, **small))
    assert a.train == b.train and a.heldout == b.heldout
    for task in TASKS:
        assert a.train[task] != c.train[task]
        assert a.train_bytes(task) >= 20_000


def test_shipped_eval_prompts_cover_every_task(shipped: list[Sample]) -> None:
    for task in TASKS:
        assert sum(s.task == task for s in shipped) >= 20
    assert all(s.prompt and s.reference for s in shipped)


def test_shipped_eval_prompts_are_what_the_corpus_builds(corpus, shipped: list[Sample]) -> None:
    # Code depends on the interpreter's stdlib files; the templated tasks only on the seed.
    for task in ("dialogue", "math", "summarization"):
        assert [s for s in shipped if s.task == task] == list(
            corpus.heldout[task][: len([s for s in shipped if s.task == task])]
        )


def test_eval_prompts_never_appear_in_training_text(corpus, shipped: list[Sample]) -> None:
    for task in TASKS:
        train_text = "\n".join(corpus.train[task])
        for sample in [s for s in shipped if s.task == task] + list(corpus.heldout[task]):
            assert sample.prompt not in train_text, (task, sample.prompt[:80])
            assert sample.text not in train_text


def test_heldout_entity_names_never_appear_in_templated_training_text(corpus) -> None:
    train_text = "\n".join(d for task in ("dialogue", "summarization") for d in corpus.train[task])
    heldout_names = entity_split(heldout=True).all_names()
    assert set(heldout_names).isdisjoint(entity_split(heldout=False).all_names())
    for name in heldout_names:
        # As a whole name: a made-up name may occur inside a longer one ("Ordra" in "Kordra").
        at = train_text.find(name)
        while at != -1:
            before, after = train_text[at - 1 : at], train_text[at + len(name) : at + len(name) + 1]
            assert before.isalpha() or after.isalpha(), (name, train_text[at - 40 : at + 40])
            at = train_text.find(name, at + 1)
    # ...and every held-out dialogue/summarization sample names at least one of them.
    for task in ("dialogue", "summarization"):
        assert all(any(n in s.prompt for n in heldout_names) for s in corpus.heldout[task])


def test_math_split_is_by_question_hash(corpus) -> None:
    train_questions = {doc.split("\nA:")[0] + "\nA:" for doc in corpus.train["math"]}
    assert not any(is_heldout_key(q) for q in train_questions)
    assert all(is_heldout_key(s.prompt) for s in corpus.heldout["math"])


def test_heldout_key_assigns_about_one_in_modulus() -> None:
    hits = sum(is_heldout_key(f"key-{i}") for i in range(8000))
    assert 850 < hits < 1150  # binomial(8000, 1/8): mean 1000, sd 29.6


def _evaluate(expr: str) -> int:
    assert re.fullmatch(r"[0-9+\-*() ]+", expr), expr
    return eval(expr, {"__builtins__": {}})  # digits and + - * ( ) only, checked above


def test_math_references_are_correct_worked_steps(corpus) -> None:
    train = [Sample("math", *doc.split("\nA:")) for doc in corpus.train["math"][:300]]
    for sample in list(corpus.heldout["math"]) + train:
        sample = Sample("math", sample.prompt.removesuffix("\nA:") + "\nA:", sample.reference)
        expr = re.fullmatch(r"Q: (.*) = \?\nA:", sample.prompt).group(1)
        steps = re.findall(r"(\d+) ([+\-*]) (\d+) = (\d+)\.", sample.reference)
        assert len(steps) >= 2
        for a, op, b, result in steps:
            assert _evaluate(f"{a} {op} {b}") == int(result)
        for (_, _, _, result), (a, _, _, _) in zip(steps, steps[1:], strict=False):
            assert result == a  # each step starts from the previous result
        answer = int(re.search(r"Answer: (\d+)\n$", sample.reference).group(1))
        assert answer == _evaluate(expr) == int(steps[-1][3])


def test_summaries_copy_salient_sentences_verbatim(corpus) -> None:
    for sample in corpus.heldout["summarization"]:
        subject = sample.prompt.split("\n")[0].removeprefix("Report: ")
        sentences = re.findall(rf"{re.escape(subject)} [^.]*\.", sample.reference)
        assert len(sentences) >= 3
        assert sample.reference == " " + " ".join(sentences) + "\n"
        body = sample.prompt.split("\n")[1]
        for sentence in sentences:
            assert sentence in body
        assert sample.prompt.endswith("\nSummary:")


def test_dialogue_prompt_ends_at_the_assistant_turn(corpus) -> None:
    for sample in corpus.heldout["dialogue"]:
        assert sample.prompt.startswith("User: ") and sample.prompt.endswith("\nAssistant:")
        assert sample.reference.startswith(" ") and sample.reference.endswith("\n")


def test_code_chunks_are_line_aligned_and_lossless() -> None:
    text = "".join(f"line {i}\n" for i in range(100))  # 100 lines of 7-8 bytes
    chunks = code_chunks(text, 128)
    assert "".join(chunks) == text
    assert all(len(c) <= 128 and c.endswith("\n") for c in chunks)
    # 10 lines of 7 bytes + 7 of 8 fill the first chunk (126); then 5 full chunks of 16 lines, 3 lines left.
    assert [len(c) for c in chunks] == [126, 128, 128, 128, 128, 128, 24]


def test_eval_prompts_file_round_trip_and_errors(tmp_path) -> None:
    path = tmp_path / "prompts.jsonl"
    samples = [
        Sample("math", "Q: 1 + 2 = ?\nA:", " 1 + 2 = 3. Answer: 3\n"),
        Sample("code", "x = 1\n", "y = 2\n"),
    ]
    write_eval_prompts(samples, path)
    assert load_eval_prompts(path) == samples
    path.write_text(json.dumps({"task": "poetry", "prompt": "a", "reference": "b"}) + "\n")
    with pytest.raises(InputError, match=r"line 1\.task"):
        load_eval_prompts(path)
    path.write_text('{"task": "math", "prompt": "a"}\n')
    with pytest.raises(InputError, match=r"line 1\.reference"):
        load_eval_prompts(path)
    path.write_text("not json\n")
    with pytest.raises(InputError, match="line 1"):
        load_eval_prompts(path)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"train_bytes_per_task": 10}, "train_bytes_per_task"),
        ({"code_prompt_fraction": 1.0}, "code_prompt_fraction"),
        ({"stdlib_dir": "/nonexistent"}, "stdlib_dir"),
    ],
)
def test_config_validation_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        CorpusConfig(**kwargs)
