"""The profile codec on a small section of its own: each hint read and written, the field options, and
errors that name the file and the dotted field."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from tripath.core.errors import InputError
from tripath.profile.codec import Section, json_field, note_field
from tripath.profile.fields import count, entries, number, text


@dataclass(frozen=True)
class Leaf(Section):
    degree: int = json_field(count(2), from_key=True)
    ratio: float = json_field(number(positive=True))


@dataclass(frozen=True)
class Tree(Section):
    JSON_ORDER = ("name", "tags", "size", "leaves", "points", "spare", "by_k", "flag", "note", "label")

    size: int = json_field(count(1))
    name: str = json_field(text())
    tags: tuple[str, ...]
    leaves: dict[int, Leaf] = json_field(key="a degree")
    points: tuple[tuple[int, float], ...] = json_field(shape="a [tokens, ratio] pair")
    spare: float | None = json_field(number())
    by_k: dict[int, float] = json_field(entries(number(), counted=True), default_factory=dict, omit=True)
    flag: bool = False
    note: str = note_field()
    label: str = json_field(default="tree", init=False)


RAW = {"name": "t", "tags": ["a", "b"], "size": 3, "leaves": {"2": {"ratio": 1}},
       "points": [[512, 1], [1024, 1.5]], "spare": None, "flag": True, "note": "", "label": "tree"}


def test_reads_every_hint_and_writes_it_back_in_json_order():
    tree = Tree.parse(json.loads(json.dumps(RAW)), "t.json")
    assert tree == Tree(3, "t", ("a", "b"), {2: Leaf(2, 1.0)}, ((512, 1.0), (1024, 1.5)), None, flag=True)
    assert tree.leaves[2].ratio == 1.0 and type(tree.leaves[2].ratio) is float  # the check keeps a float
    assert tree.label == "tree"
    out = tree.to_dict()
    assert list(out) == ["name", "tags", "size", "leaves", "points", "spare", "flag", "note", "label"]
    # a Leaf's degree is its key, not a field of its JSON; ints and floats are written as the hints say
    assert out == {**RAW, "leaves": {"2": {"ratio": 1.0}}, "points": [[512, 1.0], [1024, 1.5]]}
    assert json.dumps(Tree.parse(out).to_dict()) == json.dumps(out)


def test_omitted_field_appears_only_when_set_and_comes_back_sorted():
    tree = Tree.parse({**RAW, "by_k": {"8": 2, "1": 0.5}})
    assert list(tree.by_k) == [1, 8] and tree.to_dict()["by_k"] == {"1": 0.5, "8": 2.0}
    assert "by_k" not in Tree.parse(RAW).to_dict()


def test_missing_optional_reads_as_none_and_defaults_fill_in():
    raw = {k: v for k, v in RAW.items() if k not in ("spare", "flag", "note", "label")}
    tree = Tree.parse(raw)
    assert (tree.spare, tree.flag, tree.note, tree.label) == (None, False, "", "tree")


@pytest.mark.parametrize(("change", "field", "problem"), [
    ({"size": "3"}, "size", "must be an integer, got string '3'"),
    ({"size": 3.0}, "size", "must be an integer, got number 3.0"),
    ({"size": True}, "size", "must be an integer, got boolean True"),
    ({"size": 0}, "size", "must be an integer >= 1, got 0"),
    ({"name": 1}, "name", "must be a string, got number"),
    ({"name": ""}, "name", "must not be empty"),
    ({"tags": "a"}, "tags", "must be an array, got string"),
    ({"tags": ["a", 2]}, "tags[1]", "must be a string, got number"),
    ({"leaves": []}, "leaves", "must be an object, got array"),
    ({"leaves": {"two": {"ratio": 1}}}, "leaves.two", "key must be a degree (an integer >= 1)"),
    ({"leaves": {"0": {"ratio": 1}}}, "leaves.0", "key must be a degree (an integer >= 1)"),
    ({"leaves": {"1": {"ratio": 1}}}, "leaves.1.degree", "must be an integer >= 2, got 1"),
    ({"leaves": {"2": {"ratio": 0}}}, "leaves.2.ratio", "must be a finite number > 0, got 0"),
    ({"leaves": {"2": {"ratio": 1, "degree": 2}}}, "leaves.2.degree", "unknown field"),
    ({"leaves": {"2": {}}}, "leaves.2.ratio", "missing required field"),
    ({"points": [[1, 2, 3]]}, "points[0]", "must be a [tokens, ratio] pair, got [1, 2, 3]"),
    ({"points": [[1.5, 2]]}, "points[0][0]", "must be an integer, got number 1.5"),
    ({"points": [[1, "x"]]}, "points[0][1]", "must be a number, got string"),
    ({"spare": -1}, "spare", "must be a finite number >= 0, got -1"),
    ({"flag": 1}, "flag", "must be a boolean, got number"),
    ({"by_k": {"1": -2}}, "by_k.1", "must be a finite number >= 0, got -2"),
    ({"label": 5}, "label", "must be a string, got number"),
    ({"colour": "red"}, "colour", "unknown field"),
])
def test_errors_name_the_file_and_the_dotted_field(change, field, problem):
    with pytest.raises(InputError) as info:
        Tree.parse({**RAW, **change}, "t.json", "trees.first")
    assert (info.value.source, info.value.field, info.value.problem) == ("t.json", f"trees.first.{field}", problem)


def test_missing_field_and_non_object():
    raw = {k: v for k, v in RAW.items() if k != "tags"}
    with pytest.raises(InputError, match=r"^t\.json: tags: missing required field$"):
        Tree.parse(raw, "t.json")
    with pytest.raises(InputError, match=r"^t\.json: \(top level\): must be an object, got array$"):
        Tree.parse([], "t.json")


def test_checks_run_when_built_in_code_too():
    with pytest.raises(InputError, match=r"^size: must be an integer >= 1, got 0$"):
        Tree(0, "t", (), {}, (), None)
    with pytest.raises(InputError, match=r"^by_k\.0: must be an integer >= 1, got 0$"):
        Tree(1, "t", (), {}, (), None, {0: 1.0})


def test_json_order_must_name_every_json_field():
    @dataclass(frozen=True)
    class Partial(Section):
        JSON_ORDER = ("b",)

        a: int
        b: int

    with pytest.raises(TypeError, match="JSON_ORDER must name each of its JSON fields once"):
        Partial(1, 2)
