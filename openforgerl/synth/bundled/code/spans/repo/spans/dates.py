"""Calendar dates: parsing, month arithmetic, ranges and business days (on datetime.date values)."""

from datetime import date, timedelta

MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def parse_date(text):
    """The date "2024-03-01" stands for (date(2024, 3, 1)); "2024/03/01" and "20240301" work too."""
    text = text.strip()
    if len(text) == 8 and text.isdigit():
        year, month, day = int(text[:4]), int(text[4:6]), int(text[6:])
    else:
        for separator in "-/":
            parts = text.split(separator)
            if len(parts) == 3:
                break
        else:
            raise ValueError(f"not a date: {text!r}")
        year, month, day = (int(part) for part in parts)
    if not 1 <= month <= 12:
        raise ValueError(f"month out of range: {month}")
    if not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"day out of range: {day}")
    return date(year, month, day)


def is_leap_year(year):
    """Gregorian rule: every fourth year, except centuries not divisible by 400."""
    if year % 400 == 0:
        return True
    if year % 100 == 0:
        return False
    return year % 4 == 0


def days_in_month(year, month):
    """Number of days in ``month`` (1-12) of ``year``."""
    if month == 2 and is_leap_year(year):
        return 29
    return MONTH_DAYS[month - 1]


def add_months(day, months):
    """The same day of the month ``months`` later (or earlier), clamped to the month's last day.

    One month after 2024-01-31 is 2024-02-29.
    """
    index = day.year * 12 + (day.month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    return date(year, month, min(day.day, days_in_month(year, month)))


def date_range(start, stop, step=1):
    """Dates from ``start`` up to but not including ``stop``, every ``step`` days."""
    if step < 1:
        raise ValueError("step must be positive")
    dates = []
    current = start
    while current < stop:
        dates.append(current)
        current += timedelta(days=step)
    return dates


def business_days(start, stop, holidays=()):
    """How many weekdays (Monday to Friday) in ``[start, stop)`` are not in ``holidays``."""
    count = 0
    for day in date_range(start, stop):
        if day.weekday() >= 5:
            continue
        if day in holidays:
            continue
        count += 1
    return count


def quarter(day):
    """The quarter (1-4) a date falls in."""
    return (day.month - 1) // 3 + 1


def month_span(year, month):
    """The first day of ``month`` and the first day of the month after it."""
    first = date(year, month, 1)
    if month == 12:
        return first, date(year + 1, 1, 1)
    return first, date(year, month + 1, 1)
