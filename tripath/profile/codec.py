"""The profile's one JSON codec: each dataclass's fields and type hints say how it is read and written.

Reading (``decode``) checks structure and JSON types and names the file and the dotted field on error:
is it an object, which keys are missing or unknown, is a value a string, an integer, a number, an array.
Values are then checked when the dataclass is built: ``Section.__post_init__`` runs the ``check`` hook
declared with each field (``json_field``), so a profile built in code is held to the same rules as one
read from a file; a hook names its field relative to the dataclass and ``decode`` prefixes the
dataclass's place in the file. Cross-field checks follow in the class's own ``__post_init__``.

Writing (``encode``) is the canonical inverse: keys in field order (or the class's ``JSON_ORDER``), an
``omit`` field left out while it holds its default (so files written before it existed keep their bytes),
int and float hints written as int and float, tuples as arrays, integer keys as text.

Hints understood: str, int, float, bool, ``X | None`` (missing reads as None), ``tuple[X, ...]``, fixed
``tuple[X, Y, ...]``, ``list[X]``, ``dict[str, X]``, ``dict[int, X]`` (keys integers >= 1) and nested
``Section`` dataclasses.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, ClassVar, Self, TypeVar, Union

from tripath.core.errors import InputError
from tripath.profile.fields import Hook, json_type, text

S = TypeVar("S", bound="Section")
_META = "tripath.profile.codec"
_MISSING: Any = dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """How one field is read, written and checked (``json_field``'s arguments)."""

    check: Hook | None = None
    omit: bool = False
    key: str = "an integer"
    from_key: bool = False
    required: bool = False
    shape: str = ""


_PLAIN = FieldSpec()


def json_field(check: Hook | None = None, *, default: Any = _MISSING, default_factory: Any = _MISSING,
               omit: bool = False, key: str = "an integer", from_key: bool = False, required: bool = False,
               shape: str = "", init: bool = True) -> Any:
    """A dataclass field with its codec options.

    check: ``hook(field_name, value) -> value kept`` run when the dataclass is built (skipped for None in an
    optional field); omit: left out of the JSON while equal to its default; key: for ``dict[int, X]``, what
    the key is (for messages); from_key: not in the JSON, the key of the table that holds this section;
    required: must be in the JSON although the dataclass has a default; shape: for a fixed-length tuple,
    its JSON shape (for messages); init=False with a default: a constant, written and read back ignored.
    """
    spec = FieldSpec(check, omit, key, from_key, required, shape)
    return dataclasses.field(default=default, default_factory=default_factory, init=init, metadata={_META: spec})


def note_field() -> Any:
    """A free-text note: any string, empty by default."""
    return json_field(text(nonempty=False), default="")


@dataclasses.dataclass(frozen=True)
class _Slot:
    name: str
    hint: Any
    spec: FieldSpec
    init: bool
    default: Any
    optional: bool


class Section:
    """Base of the profile's dataclasses: checked when built, read and written by this codec."""

    JSON_ORDER: ClassVar[tuple[str, ...]] = ()  # the JSON key order where it is not the field order

    def __post_init__(self) -> None:
        for slot in _layout(type(self)):
            check = slot.spec.check
            if check is None or not slot.init:
                continue
            value = getattr(self, slot.name)
            if value is None and slot.optional:
                continue
            object.__setattr__(self, slot.name, check(slot.name, value))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this section."""
        return encode(self)

    @classmethod
    def parse(cls, raw: object, source: str | None = None, path: str = "", key: Any = None) -> Self:
        """Build from parsed JSON; ``source`` and ``path`` place errors (the file, this object's dotted field),
        ``key`` fills a ``from_key`` field."""
        return decode(cls, raw, source, path, key)


def join(path: str, name: str) -> str:
    """Dotted path of ``name`` inside ``path`` (the top level has an empty path)."""
    return f"{path}.{name}" if path else name


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)


def _without_none(hint: Any) -> Any:
    if not _is_union(hint):
        return hint
    inner = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if len(inner) != 1:
        raise TypeError(f"no JSON codec for the union {hint!r}")
    return inner[0]


@functools.cache
def _layout(cls: type) -> tuple[_Slot, ...]:
    """The JSON fields of a Section class in JSON order (caches built after init are not JSON)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    in_json = [f.name for f in fields.values() if f.init or _META in f.metadata]
    order = cls.JSON_ORDER or tuple(in_json)
    if sorted(order) != sorted(in_json):
        raise TypeError(f"{cls.__name__}.JSON_ORDER must name each of its JSON fields once: {in_json}")
    slots = []
    for name in order:
        f = fields[name]
        spec = f.metadata.get(_META)
        default = f.default if f.default is not _MISSING else (
            f.default_factory() if f.default_factory is not _MISSING else _MISSING)
        hint = hints[name]
        optional = _is_union(hint) and type(None) in typing.get_args(hint)
        slots.append(_Slot(name, hint, spec or _PLAIN, f.init, default, optional))
    return tuple(slots)


def _build(cls: type[S], source: str | None, path: str, kwargs: dict[str, Any]) -> S:
    """Construct, moving a value error from the class's checks to its place in the file."""
    try:
        return cls(**kwargs)
    except InputError as err:
        raise InputError(source, join(path, err.field or ""), err.problem) from None


def decode(cls: type[S], raw: object, source: str | None, path: str, key: Any = None) -> S:
    """A ``cls`` from parsed JSON; every key must be a field of it: a typo is an error, not ignored."""
    if not isinstance(raw, dict):
        raise InputError(source, path or "(top level)", f"must be an object, got {json_type(raw)}")
    kwargs: dict[str, Any] = {}
    known = set()
    for slot in _layout(cls):
        if slot.spec.from_key:
            kwargs[slot.name] = key
            continue
        known.add(slot.name)
        where = join(path, slot.name)
        if slot.name not in raw:
            if slot.spec.required or (slot.default is _MISSING and not slot.optional):
                raise InputError(source, where, "missing required field")
            if slot.default is _MISSING:
                kwargs[slot.name] = None
            continue
        value = _decode_value(slot.hint, raw[slot.name], source, where, slot.spec)
        if slot.init:
            kwargs[slot.name] = value
    for name in raw:
        if name not in known:
            raise InputError(source, join(path, name), "unknown field")
    return _build(cls, source, path, kwargs)


def _decode_value(hint: Any, raw: object, source: str | None, where: str, spec: FieldSpec,
                  key: Any = None) -> Any:
    if _is_union(hint):
        return None if raw is None else _decode_value(_without_none(hint), raw, source, where, spec, key)
    if isinstance(hint, type) and issubclass(hint, Section):
        return decode(hint, raw, source, where, key)
    if hint is str:
        if not isinstance(raw, str):
            raise InputError(source, where, f"must be a string, got {json_type(raw)}")
        return raw
    if hint is bool:
        if not isinstance(raw, bool):
            raise InputError(source, where, f"must be a boolean, got {json_type(raw)}")
        return raw
    # bool is an int in Python but not in JSON; 3.0 is a number but not a count.
    if hint is int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise InputError(source, where, f"must be an integer, got {json_type(raw)} {raw!r}")
        return raw
    if hint is float:  # kept as read: the field's check converts it, so messages quote the file's number
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise InputError(source, where, f"must be a number, got {json_type(raw)}")
        return raw
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is dict:
        return _decode_dict(args, raw, source, where, spec)
    if origin in (tuple, list):
        if not isinstance(raw, list):
            raise InputError(source, where, f"must be an array, got {json_type(raw)}")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(raw) != len(args):
                shape = spec.shape or f"an array of {len(args)} items"
                raise InputError(source, where, f"must be {shape}, got {raw!r}")
            return tuple(_decode_value(arg, item, source, f"{where}[{i}]", spec)
                         for i, (arg, item) in enumerate(zip(args, raw, strict=True)))
        items = [_decode_value(args[0], item, source, f"{where}[{i}]", spec) for i, item in enumerate(raw)]
        return tuple(items) if origin is tuple else items
    raise TypeError(f"no JSON codec for {hint!r}")


def _decode_dict(args: tuple[Any, ...], raw: object, source: str | None, where: str, spec: FieldSpec) -> dict:
    if not isinstance(raw, dict):
        raise InputError(source, where, f"must be an object, got {json_type(raw)}")
    key_hint, value_hint = args
    out: dict[Any, Any] = {}
    for name, item in raw.items():
        at = f"{where}.{name}"
        key: Any = name
        if key_hint is int:  # JSON keys are text: {"4": x} -> {4: x}
            if not name.isdigit() or int(name) < 1:
                raise InputError(source, at, f"key must be {spec.key} (an integer >= 1)")
            key = int(name)
        out[key] = _decode_value(value_hint, item, source, at, spec, key)
    return out


def encode(obj: Section) -> dict[str, Any]:
    """The JSON object of ``obj``: the inverse of ``decode``, canonical so a round trip keeps the bytes."""
    out: dict[str, Any] = {}
    for slot in _layout(type(obj)):
        if slot.spec.from_key:
            continue
        value = getattr(obj, slot.name)
        if slot.spec.omit and value == slot.default:
            continue
        out[slot.name] = _encode_value(slot.hint, value)
    return out


def _encode_value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, Section):
        return encode(value)
    hint = _without_none(hint)
    if hint is int:
        return int(value)
    if hint is float:
        return float(value)
    if hint in (str, bool):
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is dict:
        return {str(k): _encode_value(args[1], v) for k, v in value.items()}
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return [_encode_value(arg, item) for arg, item in zip(args, value, strict=True)]
    if origin in (tuple, list):
        return [_encode_value(args[0], item) for item in value]
    raise TypeError(f"no JSON codec for {hint!r}")

