"""spans: half-open intervals and calendar-date helpers."""

from spans.dates import add_months, business_days, date_range, days_in_month, is_leap_year, parse_date, quarter
from spans.interval import Interval, coverage, gaps, merge, subtract

__all__ = ["Interval", "add_months", "business_days", "coverage", "date_range", "days_in_month", "gaps",
           "is_leap_year", "merge", "parse_date", "quarter", "subtract"]
