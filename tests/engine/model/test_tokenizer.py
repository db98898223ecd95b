"""The byte tokenizer: exact round trips, specials framed and dropped, vocabulary validated."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tripath.engine.model.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE, ByteTokenizer

TOK = ByteTokenizer()


@given(st.binary(max_size=512))
def test_arbitrary_bytes_round_trip(data: bytes) -> None:
    ids = TOK.encode(data)
    assert ids == list(data)  # token id = byte value
    assert TOK.decode_bytes(ids) == data


@given(st.text(max_size=256))
def test_unicode_text_round_trips_through_utf8(text: str) -> None:
    ids = TOK.encode(text, add_bos=True, add_eos=True)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID
    assert len(ids) == len(text.encode("utf-8")) + 2  # one token per UTF-8 byte
    assert TOK.decode(ids) == text


def test_hand_computed_ids() -> None:
    assert TOK.encode("Hi é") == [72, 105, 32, 0xC3, 0xA9]
    assert TOK.encode("a", add_bos=True) == [256, 97]


def test_specials_are_dropped_and_eos_truncates() -> None:
    assert TOK.decode([BOS_ID, 104, 105, PAD_ID, EOS_ID]) == "hi"
    assert TOK.truncate_at_eos([1, 2, EOS_ID, 3]) == [1, 2]
    assert TOK.truncate_at_eos([1, 2]) == [1, 2]


def test_partial_utf8_decodes_with_replacement_char() -> None:
    assert TOK.decode([0xC3]) == "\ufffd"


def test_ids_outside_vocabulary_are_rejected() -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        TOK.decode([VOCAB_SIZE])
    with pytest.raises(ValueError):
        TOK.decode([-1])


def test_vocabulary_is_bytes_plus_specials_rounded_to_eight() -> None:
    assert VOCAB_SIZE % 8 == 0 and 259 <= VOCAB_SIZE < 259 + 8
    assert {BOS_ID, EOS_ID, PAD_ID} == {256, 257, 258}


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"bos_id": 10}, "bos_id"),
        ({"eos_id": 256}, "bos_id/eos_id/pad_id"),
        ({"vocab_size": 260}, "vocab_size"),
    ],
)
def test_invalid_config_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ByteTokenizer(**kwargs)
