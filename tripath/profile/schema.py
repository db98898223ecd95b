"""The plain sections of a calibration profile: key, hardware, model, memory budget, provenance.

Each is a frozen dataclass validated when built, with ``to_dict`` and ``parse`` (from parsed JSON,
naming the file and dotted field on error). The optimization-path sections (speculative,
acceptance, paging, sequence parallel, compression) live in ``tripath/profile/sections.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tripath.core.errors import InputError
from tripath.profile.cost_model import Coefficient
from tripath.profile.fields import VALUE_SOURCES, JsonObject, build, check_count, check_text

# Link bandwidths are Coefficients whose unit must be this, so consumers never guess GB vs Gb.
LINK_UNIT = "GB/s"


@dataclass(frozen=True)
class ProfileKey:
    """What a profile is for: one (hardware, model, dtype, tensor-parallel degree, engine commit)."""

    hardware: str
    model: str
    dtype: str
    tp: int
    engine_commit: str

    def __post_init__(self) -> None:
        for name in ("hardware", "model", "dtype", "engine_commit"):
            check_text(name, getattr(self, name))
            if "/" in getattr(self, name):  # "/" separates the parts of key_str()
                raise InputError(None, name, f"must not contain '/', got {getattr(self, name)!r}")
        check_count("tp", self.tp, low=1)

    def __str__(self) -> str:
        return f"{self.hardware}/{self.model}/{self.dtype}/tp{self.tp}/{self.engine_commit}"

    def to_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "model": self.model, "dtype": self.dtype, "tp": self.tp,
                "engine_commit": self.engine_commit}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> ProfileKey:
        obj = JsonObject(raw, source, path)
        kwargs = {"hardware": obj.string("hardware"), "model": obj.string("model"),
                  "dtype": obj.string("dtype"), "tp": obj.integer("tp"),
                  "engine_commit": obj.string("engine_commit")}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class Hardware:
    """Memory per tier (bytes) and link bandwidths (Coefficients in GB/s, keyed by link name).

    Link names used by the simulator: ``device_host`` (GPU <-> host RAM), ``host_ssd``
    (host RAM <-> SSD), ``interconnect`` (GPU <-> GPU, for sequence parallelism).
    """

    device_name: str
    device_memory_bytes: int
    host_memory_bytes: int
    ssd_bytes: int
    links: dict[str, Coefficient]
    note: str = ""

    def __post_init__(self) -> None:
        check_text("device_name", self.device_name)
        check_count("device_memory_bytes", self.device_memory_bytes, low=1)
        check_count("host_memory_bytes", self.host_memory_bytes)
        check_count("ssd_bytes", self.ssd_bytes)
        for name, link in self.links.items():
            if not isinstance(link, Coefficient):
                raise InputError(None, f"links.{name}", "must be a Coefficient")
            if link.unit != LINK_UNIT:
                raise InputError(None, f"links.{name}.unit", f"must be {LINK_UNIT!r}, got {link.unit!r}")
            if not link.value > 0:
                raise InputError(None, f"links.{name}.value",
                                 f"must be a finite number > 0, got {link.value!r}")
        check_text("note", self.note, nonempty=False)

    def link_gbps(self, name: str) -> float:
        """Bandwidth of link ``name`` in GB/s (1e9 bytes/s)."""
        return self.links[name].value

    def to_dict(self) -> dict[str, Any]:
        return {"device_name": self.device_name, "device_memory_bytes": self.device_memory_bytes,
                "host_memory_bytes": self.host_memory_bytes, "ssd_bytes": self.ssd_bytes,
                "links": {name: link.to_dict() for name, link in self.links.items()}, "note": self.note}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> Hardware:
        obj = JsonObject(raw, source, path)
        links = {name: Coefficient.parse(value, source, obj.where(f"links.{name}"))
                 for name, value in obj.mapping("links").items()}
        kwargs = {"device_name": obj.string("device_name"),
                  "device_memory_bytes": obj.integer("device_memory_bytes"),
                  "host_memory_bytes": obj.integer("host_memory_bytes"),
                  "ssd_bytes": obj.integer("ssd_bytes"), "links": links, "note": obj.string("note", "")}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class ModelSpec:
    """The served model's architecture and sizes.

    kv_bytes_per_token must equal 2 (K and V) x layers x kv_heads x head_dim x dtype_bytes: the
    cache stores one key and one value vector per KV head per layer for every token.
    """

    name: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    params: int
    dtype_bytes: int
    kv_bytes_per_token: int
    weight_bytes: int
    note: str = ""

    def __post_init__(self) -> None:
        check_text("name", self.name)
        for name in ("layers", "heads", "kv_heads", "head_dim", "hidden", "params", "dtype_bytes",
                     "kv_bytes_per_token", "weight_bytes"):
            check_count(name, getattr(self, name), low=1)
        if self.heads % self.kv_heads:
            raise InputError(None, "kv_heads", f"must divide heads ({self.heads}), got {self.kv_heads}")
        expected = 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes
        if self.kv_bytes_per_token != expected:
            raise InputError(None, "kv_bytes_per_token", f"must be 2*layers*kv_heads*head_dim*dtype_bytes = "
                             f"{expected}, got {self.kv_bytes_per_token}")
        check_text("note", self.note, nonempty=False)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in (
            "name", "layers", "heads", "kv_heads", "head_dim", "hidden", "params", "dtype_bytes",
            "kv_bytes_per_token", "weight_bytes", "note")}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> ModelSpec:
        obj = JsonObject(raw, source, path)
        kwargs: dict[str, Any] = {"name": obj.string("name"), "note": obj.string("note", "")}
        for name in ("layers", "heads", "kv_heads", "head_dim", "hidden", "params", "dtype_bytes",
                     "kv_bytes_per_token", "weight_bytes"):
            kwargs[name] = obj.integer(name)
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class MemoryBudget:
    """The KV-cache budget of one replica in bytes, with where that number comes from."""

    kv_capacity_bytes: int
    source: str
    note: str = ""

    def __post_init__(self) -> None:
        check_count("kv_capacity_bytes", self.kv_capacity_bytes, low=1)
        check_text("source", self.source, allowed=VALUE_SOURCES)
        check_text("note", self.note, nonempty=False)

    def to_dict(self) -> dict[str, Any]:
        return {"kv_capacity_bytes": self.kv_capacity_bytes, "source": self.source, "note": self.note}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> MemoryBudget:
        obj = JsonObject(raw, source, path)
        kwargs = {"kv_capacity_bytes": obj.integer("kv_capacity_bytes"), "source": obj.string("source"),
                  "note": obj.string("note", "")}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class Provenance:
    """How the numbers were produced: command, engine commit, software and device, time, seed documents."""

    command: str
    engine_commit: str
    torch_version: str | None
    cuda_version: str | None
    device_name: str | None
    created_utc: str
    seed_documents: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_text("command", self.command)
        check_text("engine_commit", self.engine_commit)
        for name in ("torch_version", "cuda_version", "device_name"):
            if getattr(self, name) is not None:
                check_text(name, getattr(self, name))
        check_text("created_utc", self.created_utc)
        object.__setattr__(self, "seed_documents", tuple(self.seed_documents))
        for i, doc in enumerate(self.seed_documents):
            check_text(f"seed_documents[{i}]", doc)

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command, "engine_commit": self.engine_commit,
                "torch_version": self.torch_version, "cuda_version": self.cuda_version,
                "device_name": self.device_name, "created_utc": self.created_utc,
                "seed_documents": list(self.seed_documents)}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> Provenance:
        obj = JsonObject(raw, source, path)
        kwargs = {"command": obj.string("command"), "engine_commit": obj.string("engine_commit"),
                  "torch_version": obj.string("torch_version", None),
                  "cuda_version": obj.string("cuda_version", None),
                  "device_name": obj.string("device_name", None), "created_utc": obj.string("created_utc"),
                  "seed_documents": tuple(obj.array("seed_documents", []))}
        obj.finish()
        return build(cls, source, path, **kwargs)
