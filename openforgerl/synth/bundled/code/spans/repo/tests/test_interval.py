import pytest
from spans.interval import Interval, coverage, gaps, longest, merge, subtract


def test_length():
    assert Interval(3, 10).length == 7


def test_rejects_reversed_interval():
    with pytest.raises(ValueError):
        Interval(5, 2)


def test_contains_start_but_not_end():
    assert Interval(1, 4).contains(1)
    assert not Interval(1, 4).contains(4)


def test_overlaps():
    assert Interval(0, 5).overlaps(Interval(4, 9))


def test_touching_intervals_do_not_overlap():
    assert not Interval(0, 5).overlaps(Interval(5, 9))


def test_empty_interval_overlaps_nothing():
    assert not Interval(3, 3).overlaps(Interval(0, 10))


def test_intersection():
    assert Interval(0, 10).intersection(Interval(4, 20)) == Interval(4, 10)


def test_intersection_of_disjoint():
    assert Interval(0, 2).intersection(Interval(5, 9)) is None


def test_merge_overlapping_and_touching():
    merged = merge([Interval(5, 8), Interval(1, 3), Interval(2, 5), Interval(10, 12)])
    assert merged == [Interval(1, 8), Interval(10, 12)]


def test_merge_drops_empty():
    assert merge([Interval(4, 4), Interval(1, 2)]) == [Interval(1, 2)]


def test_merge_nested():
    assert merge([Interval(0, 10), Interval(2, 3)]) == [Interval(0, 10)]


def test_subtract_middle():
    assert subtract(Interval(0, 10), [Interval(3, 5)]) == [Interval(0, 3), Interval(5, 10)]


def test_subtract_edges_and_outside():
    removed = [Interval(-5, 2), Interval(8, 20), Interval(30, 40)]
    assert subtract(Interval(0, 10), removed) == [Interval(2, 8)]


def test_subtract_everything():
    assert subtract(Interval(0, 10), [Interval(0, 10)]) == []


def test_gaps_in_schedule():
    busy = [Interval(9, 10), Interval(12, 13), Interval(9, 11)]
    assert gaps(busy, Interval(8, 14)) == [Interval(8, 9), Interval(11, 12), Interval(13, 14)]


def test_coverage_counts_overlap_once():
    assert coverage([Interval(0, 4), Interval(2, 6), Interval(10, 11)]) == 7


def test_longest():
    assert longest([Interval(0, 2), Interval(5, 9), Interval(1, 3)]) == Interval(5, 9)


def test_longest_of_nothing():
    assert longest([]) is None
