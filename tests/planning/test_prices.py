"""GPU prices: the shipped table loads and prices every profiled GPU type; overrides win and say so; a bad file
or a bad --gpu-price is one clear error naming the field; $ per million output tokens by hand."""

from __future__ import annotations

import argparse
import math

import pytest

from tripath.core.errors import InputError
from tripath.planning.prices import (
    OVERRIDE_SOURCE,
    PRICES_PATH,
    GpuPrices,
    cost_per_million_output_tokens,
    load_prices,
    parse_price_override,
)
from tripath.profile.catalog import GPUS

ENTRY = """usd_per_gpu_hour = 2.5
provider = "Example Cloud"
offering = "8-GPU instance, on-demand: $20.00/hour / 8"
date = 2026-01-02
url = "https://example.com/pricing"
"""


def write(tmp_path, text: str):
    path = tmp_path / "prices.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_shipped_file_prices_every_profiled_gpu_type_with_a_citation():
    prices = load_prices()
    assert prices.path == str(PRICES_PATH)
    assert set(GPUS) == {"a100-80gb", "h100-sxm", "h200", "b200"}
    assert set(GPUS) <= set(prices.gpu_types)
    for gpu in GPUS:
        assert math.isfinite(prices.price(gpu)) and prices.price(gpu) > 0
        source = prices.source(gpu)
        assert source.strip() and "http" in source and "20" in source  # a URL and a date


def test_a_file_given_by_path_loads_in_its_order(tmp_path):
    path = write(tmp_path, f"[h200]\n{ENTRY}\n[a100-80gb]\n{ENTRY.replace('2.5', '1')}")
    prices = load_prices(path)
    assert prices.gpu_types == ("h200", "a100-80gb")
    assert prices.price("h200") == 2.5 and prices.price("a100-80gb") == 1.0
    assert prices.source("h200") == ("Example Cloud, 8-GPU instance, on-demand: $20.00/hour / 8, as of 2026-01-02 "
                                     "(https://example.com/pricing)")
    assert prices.path == str(path)


def test_overrides_win_are_marked_and_leave_the_original_alone():
    prices = load_prices()
    shipped = prices.price("h100-sxm")
    changed = prices.with_overrides([("h100-sxm", 3.0), ("h100-sxm", 3.99), ("cpu", 0.1)])
    assert changed.price("h100-sxm") == 3.99  # the later of two overrides for one type
    assert changed.source("h100-sxm") == OVERRIDE_SOURCE == "given with --gpu-price"
    assert changed.price("cpu") == 0.1
    assert changed.price("a100-80gb") == prices.price("a100-80gb")
    assert changed.source("a100-80gb") == prices.source("a100-80gb")
    assert prices.price("h100-sxm") == shipped and "cpu" not in prices.gpu_types
    assert changed.path == prices.path


@pytest.mark.parametrize("pair, words", [(("h100", 3.0), "unknown GPU type"), (("h200", 0.0), "> 0"),
                                         (("h200", float("nan")), "> 0"), (("h200", "3"), "a number")])
def test_a_bad_override_pair_is_an_input_error(pair, words):
    with pytest.raises(InputError) as err:
        load_prices().with_overrides([pair])
    assert err.value.field == "--gpu-price" and words in err.value.problem


def test_a_gpu_type_with_no_price_says_how_to_give_one(tmp_path):
    prices = load_prices(write(tmp_path, f"[a100-80gb]\n{ENTRY}"))
    for ask in (prices.price, prices.source):
        with pytest.raises(InputError) as err:
            ask("b200")
        assert err.value.source == prices.path and err.value.field == "b200"
        assert "no price for GPU type b200: give --gpu-price b200=PRICE" in str(err.value)
    with pytest.raises(InputError, match="does not know"):
        prices.price("tpu-v5")
    assert GpuPrices({}, "x.toml").gpu_types == ()


@pytest.mark.parametrize("text, field, words", [
    ("[h200\nusd_per_gpu_hour = 1", None, "invalid TOML"),
    ("[h200]\n" + ENTRY.replace("usd_per_gpu_hour = 2.5\n", ""), "h200.usd_per_gpu_hour", "missing"),
    ("[h200]\n" + ENTRY.replace('url = "https://example.com/pricing"\n', ""), "h200.url", "missing"),
    ("[h200]\n" + ENTRY.replace("2.5", "-2.5"), "h200.usd_per_gpu_hour", "> 0"),
    ("[h200]\n" + ENTRY.replace("2.5", "0"), "h200.usd_per_gpu_hour", "> 0"),
    ("[h200]\n" + ENTRY.replace("2.5", "nan"), "h200.usd_per_gpu_hour", "> 0"),
    ("[h200]\n" + ENTRY.replace("2.5", "inf"), "h200.usd_per_gpu_hour", "> 0"),
    ("[h200]\n" + ENTRY.replace("2.5", '"2.5"'), "h200.usd_per_gpu_hour", "must be a number"),
    ("[h200]\n" + ENTRY.replace("2.5", "true"), "h200.usd_per_gpu_hour", "must be a number"),
    ("[h200]\n" + ENTRY + "currency = \"EUR\"\n", "h200.currency", "unknown field"),
    ("[h200]\n" + ENTRY.replace("usd_per_gpu_hour", "usd_per_gpu_hr"), "h200.usd_per_gpu_hr", "unknown field"),
    ("[h100]\n" + ENTRY, "h100", "did you mean 'h100-sxm'"),
    ("h200 = 2.5\n", "h200", "must be a table"),
    ("[h200]\n" + ENTRY.replace("2.5", "1" + "0" * 5000), None, "invalid TOML: Exceeds the limit"),
    ("[h200]\n" + ENTRY.replace("2.5", "1" + "0" * 30), "h200.usd_per_gpu_hour", "must be at most"),
    ("[h200]\n" + ENTRY.replace("2026-01-02", '"2026-01-02"'), "h200.date", "YYYY-MM-DD"),
    ("[h200]\n" + ENTRY.replace("2026-01-02", "2026-01-02T10:00:00"), "h200.date", "YYYY-MM-DD"),
    ("[h200]\n" + ENTRY.replace('"Example Cloud"', '"  "'), "h200.provider", "empty"),
    ("[h200]\n" + ENTRY.replace('"Example Cloud"', "3"), "h200.provider", "must be str"),
])
def test_a_bad_file_is_one_input_error_naming_the_file_and_field(tmp_path, text, field, words):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_prices(path)
    assert err.value.source == str(path) and err.value.field == field
    assert words in err.value.problem
    assert "\n" not in str(err.value)


def test_a_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="GPU price file not found"):
        load_prices(tmp_path / "absent.toml")


@pytest.mark.parametrize("text, expected", [("h100-sxm=3.99", ("h100-sxm", 3.99)), (" h200 = 4 ", ("h200", 4.0)),
                                            ("b200=1e1", ("b200", 10.0)), ("cpu=0.05", ("cpu", 0.05))])
def test_parse_price_override(text, expected):
    assert parse_price_override(text) == expected


@pytest.mark.parametrize("text, words", [
    ("h100-sxm", "TYPE=PRICE"), ("=3", "TYPE=PRICE"), ("h200=", "TYPE=PRICE"),
    ("h200=cheap", "must be a number"), ("h200=0", "> 0"), ("h200=-1", "> 0"),
    ("h200=nan", "finite"), ("h200=inf", "finite"),
    ("h100=3", "unknown GPU type 'h100' (known: a100-80gb, h100-sxm, h200, b200, cpu); did you mean 'h100-sxm'?"),
    ("tpu=3", "known: a100-80gb, h100-sxm, h200, b200, cpu"),
])
def test_parse_price_override_errors_are_one_clear_line(text, words):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        parse_price_override(text)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_parse_price_override_works_as_an_argparse_type(capsys):
    parser = argparse.ArgumentParser(prog="tripath")
    parser.add_argument("--gpu-price", type=parse_price_override, action="append", default=[])
    assert parser.parse_args(["--gpu-price", "h200=4.5"]).gpu_price == [("h200", 4.5)]
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--gpu-price", "h200=-4"])
    assert exit_.value.code == 2 and "h200: price must be a finite number > 0" in capsys.readouterr().err


def test_cost_per_million_output_tokens_by_hand():
    # 8 H100s at $6.155 = $49.24/h producing 2,500 tokens/s: 9,000,000 tokens an hour -> $49.24 / 9 = $5.4711
    assert cost_per_million_output_tokens(49.24, 2500.0) == pytest.approx(49.24 / 9.0)
    assert cost_per_million_output_tokens(3.6, 1.0) == pytest.approx(1000.0)  # 3,600 tokens for $3.60
    assert cost_per_million_output_tokens(0.0, 10.0) == 0.0
    assert cost_per_million_output_tokens(10.0, 0.0) is None
    for bad in ((-1.0, 1.0), (1.0, -1.0), (float("nan"), 1.0), (1.0, float("inf"))):
        with pytest.raises(ValueError):
            cost_per_million_output_tokens(*bad)
