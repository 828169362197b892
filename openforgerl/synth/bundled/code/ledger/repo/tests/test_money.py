import pytest
from ledger.money import format_amount, parse_amount, percent_of, split_evenly


def test_parse_with_thousands():
    assert parse_amount("1,234.5") == 123450


def test_parse_negative_cents():
    assert parse_amount("-0.07") == -7


def test_parse_whole():
    assert parse_amount("12") == 1200


def test_parse_leading_dot():
    assert parse_amount(".5") == 50


def test_parse_rejects_three_decimals():
    with pytest.raises(ValueError):
        parse_amount("1.005")


def test_parse_rejects_letters():
    with pytest.raises(ValueError):
        parse_amount("12abc")


def test_format_thousands():
    assert format_amount(123450) == "$1,234.50"


def test_format_millions():
    assert format_amount(123456789) == "$1,234,567.89"


def test_format_negative_small():
    assert format_amount(-7, symbol="€") == "-€0.07"


def test_split_evenly_remainder_first():
    assert split_evenly(1000, 3) == [334, 333, 333]


def test_split_evenly_exact():
    assert split_evenly(900, 3) == [300, 300, 300]


def test_split_evenly_rejects_zero_parts():
    with pytest.raises(ValueError):
        split_evenly(100, 0)


def test_percent_rounds_half_up():
    assert percent_of(250, 7) == 18


def test_percent_rounds_down():
    assert percent_of(1234, 10) == 123


def test_percent_of_negative():
    assert percent_of(-250, 7) == -18
