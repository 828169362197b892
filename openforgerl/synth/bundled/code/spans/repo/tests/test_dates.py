from datetime import date

import pytest
from spans.dates import (
    add_months,
    business_days,
    date_range,
    days_in_month,
    is_leap_year,
    month_span,
    parse_date,
    quarter,
)


def test_parse_iso():
    assert parse_date("2024-03-01") == date(2024, 3, 1)


def test_parse_slashes_and_compact():
    assert parse_date("2023/12/31") == date(2023, 12, 31)
    assert parse_date("20230105") == date(2023, 1, 5)


def test_parse_rejects_bad_day():
    with pytest.raises(ValueError):
        parse_date("2023-02-29")


def test_parse_rejects_bad_month():
    with pytest.raises(ValueError):
        parse_date("2023-13-01")


def test_parse_rejects_garbage():
    with pytest.raises(ValueError):
        parse_date("March 1st")


def test_leap_years():
    assert [year for year in (1900, 1996, 2000, 2023, 2024) if is_leap_year(year)] == [1996, 2000, 2024]


def test_days_in_february():
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2023, 2) == 28


def test_days_in_december():
    assert days_in_month(2023, 12) == 31


def test_add_months_clamps():
    assert add_months(date(2024, 1, 31), 1) == date(2024, 2, 29)


def test_add_months_across_year():
    assert add_months(date(2023, 11, 15), 3) == date(2024, 2, 15)


def test_add_months_backwards():
    assert add_months(date(2024, 3, 31), -13) == date(2023, 2, 28)


def test_date_range_excludes_stop():
    assert date_range(date(2024, 2, 27), date(2024, 3, 2)) == [
        date(2024, 2, 27), date(2024, 2, 28), date(2024, 2, 29), date(2024, 3, 1)]


def test_date_range_step():
    assert date_range(date(2024, 1, 1), date(2024, 1, 10), step=4) == [
        date(2024, 1, 1), date(2024, 1, 5), date(2024, 1, 9)]


def test_date_range_rejects_zero_step():
    with pytest.raises(ValueError):
        date_range(date(2024, 1, 1), date(2024, 1, 2), step=0)


def test_business_days_skip_weekend():
    assert business_days(date(2024, 5, 3), date(2024, 5, 11)) == 6


def test_business_days_skip_holidays():
    assert business_days(date(2024, 12, 23), date(2024, 12, 28), holidays={date(2024, 12, 25)}) == 4


def test_quarter():
    assert [quarter(date(2024, month, 1)) for month in (1, 3, 4, 9, 10, 12)] == [1, 1, 2, 3, 4, 4]


def test_month_span_december():
    assert month_span(2024, 12) == (date(2024, 12, 1), date(2025, 1, 1))


def test_month_span_ordinary():
    assert month_span(2024, 6) == (date(2024, 6, 1), date(2024, 7, 1))
