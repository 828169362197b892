"""Half-open intervals ``[start, end)`` of numbers, and operations on lists of them."""

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Interval:
    """The numbers ``x`` with ``start <= x < end``; an interval with ``start == end`` is empty."""

    start: int
    end: int

    def __post_init__(self):
        if self.end < self.start:
            raise ValueError(f"interval ends before it starts: {self.start} > {self.end}")

    @property
    def length(self):
        return self.end - self.start

    def is_empty(self):
        return self.start == self.end

    def contains(self, point):
        """True when ``point`` lies in the interval (the end itself is outside)."""
        return self.start <= point < self.end

    def overlaps(self, other):
        """True when the two intervals share at least one point."""
        if self.is_empty() or other.is_empty():
            return False
        return self.start < other.end and other.start < self.end

    def intersection(self, other):
        """The common part, or None when they do not overlap."""
        if not self.overlaps(other):
            return None
        return Interval(max(self.start, other.start), min(self.end, other.end))


def merge(intervals):
    """Sorted, non-overlapping intervals covering the same points; touching intervals are joined.

    Empty intervals are dropped.
    """
    merged = []
    for interval in sorted(intervals):
        if interval.is_empty():
            continue
        if merged and interval.start <= merged[-1].end:
            last = merged.pop()
            merged.append(Interval(last.start, max(last.end, interval.end)))
        else:
            merged.append(interval)
    return merged


def subtract(base, removed):
    """The parts of ``base`` not covered by any interval in ``removed``, in order."""
    pieces = []
    cursor = base.start
    for hole in merge(removed):
        if hole.end <= cursor:
            continue
        if hole.start >= base.end:
            break
        if hole.start > cursor:
            pieces.append(Interval(cursor, hole.start))
        cursor = max(cursor, hole.end)
    if cursor < base.end:
        pieces.append(Interval(cursor, base.end))
    return pieces


def gaps(intervals, window):
    """The parts of ``window`` that no interval covers (free slots in a schedule)."""
    return subtract(window, intervals)


def coverage(intervals):
    """How many points the intervals cover together (overlaps counted once)."""
    total = 0
    for interval in merge(intervals):
        total += interval.length
    return total


def longest(intervals):
    """The longest interval after merging (the first one on a tie), or None for no intervals."""
    best = None
    for interval in merge(intervals):
        if best is None or interval.length > best.length:
            best = interval
    return best
