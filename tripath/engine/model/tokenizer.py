"""Byte-level tokenizer: token id = byte value 0..255, plus BOS/EOS/PAD specials.

Bytes need no trained vocabulary, so the tiny models train on this machine with no
download, and any text (code, UTF-8 prose, digits) round-trips exactly. One token is one
byte, so lengths in tokens are lengths in UTF-8 bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

BYTE_VOCAB = 256
BOS_ID = 256
EOS_ID = 257
PAD_ID = 258
NUM_SPECIALS = 3
# Embedding tables are padded to a multiple of 8 so matmuls stay aligned; ids 259..263 are unused.
VOCAB_SIZE = 264


@dataclass(frozen=True)
class ByteTokenizer:
    """Encodes text as UTF-8 bytes; the special ids sit just above the byte range."""

    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    pad_id: int = PAD_ID
    vocab_size: int = VOCAB_SIZE

    def __post_init__(self) -> None:
        specials = (self.bos_id, self.eos_id, self.pad_id)
        for name, value in zip(("bos_id", "eos_id", "pad_id"), specials, strict=True):
            if not BYTE_VOCAB <= value < self.vocab_size:
                raise ValueError(f"{name}: must be in [{BYTE_VOCAB}, {self.vocab_size}), got {value}")
        if len(set(specials)) != len(specials):
            raise ValueError(f"bos_id/eos_id/pad_id: must be distinct, got {specials}")
        if self.vocab_size % 8 != 0:
            raise ValueError(f"vocab_size: must be a multiple of 8, got {self.vocab_size}")

    def encode(self, text: str | bytes, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of `text` (str is UTF-8 encoded first), optionally framed by BOS/EOS."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids = list(data)
        if add_bos:
            ids.insert(0, self.bos_id)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The raw bytes of `ids`, with special ids dropped; ids outside the vocabulary are an error."""
        out = bytearray()
        for token in ids:
            token = int(token)
            if 0 <= token < BYTE_VOCAB:
                out.append(token)
            elif not 0 <= token < self.vocab_size:
                raise ValueError(f"token id {token} outside the vocabulary [0, {self.vocab_size})")
        return bytes(out)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`; a model may emit a partial UTF-8 sequence, so invalid bytes become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def truncate_at_eos(self, ids: Sequence[int]) -> list[int]:
        """The ids before the first EOS (all of them when there is none)."""
        ids = list(ids)
        return ids[: ids.index(self.eos_id)] if self.eos_id in ids else ids
