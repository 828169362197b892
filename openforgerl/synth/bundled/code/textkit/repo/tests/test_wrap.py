import pytest
from textkit.wrap import center, fill, indent, truncate, wrap

TEXT = "the quick brown fox jumps over the lazy dog"


def test_wrap_greedy():
    assert wrap(TEXT, 10) == ["the quick", "brown fox", "jumps over", "the lazy", "dog"]


def test_wrap_exact_width_fits():
    assert wrap("aaaa bbbbb", 10) == ["aaaa bbbbb"]


def test_wrap_long_word_on_its_own_line():
    assert wrap("a extraordinarily b", 5) == ["a", "extraordinarily", "b"]


def test_wrap_blank_input():
    assert wrap("   ", 8) == []


def test_wrap_rejects_zero_width():
    with pytest.raises(ValueError):
        wrap("text", 0)


def test_fill_joins_lines():
    assert fill("one two three", 7) == "one two\nthree"


def test_truncate_short_text_unchanged():
    assert truncate("short", 10) == "short"


def test_truncate_at_word_boundary():
    assert truncate("hello wonderful world", 15) == "hello..."


def test_truncate_without_boundary():
    assert truncate("abcdefghijklmnop", 8) == "abcde..."


def test_truncate_tiny_width():
    assert truncate("abcdefgh", 2) == ".."


def test_center_odd_leftover_goes_right():
    assert center("abc", 8, "*") == "**abc***"


def test_center_wider_text_unchanged():
    assert center("abcdef", 4) == "abcdef"


def test_indent_skips_blank_lines():
    assert indent("a\n\nb", "> ") == "> a\n\n> b"


def test_indent_all_lines():
    assert indent("a\n\nb", "> ", skip_blank=False) == "> a\n> \n> b"
