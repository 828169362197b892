import pytest
from calc.parser import Binary, Call, Num, Unary, Var, parse


def test_parse_precedence():
    assert parse("1 + 2 * 3") == Binary("+", Num(1.0), Binary("*", Num(2.0), Num(3.0)))


def test_parse_left_associative():
    assert parse("8 - 3 - 2") == Binary("-", Binary("-", Num(8.0), Num(3.0)), Num(2.0))


def test_parse_power_right_associative():
    assert parse("2 ^ 3 ^ 2") == Binary("^", Num(2.0), Binary("^", Num(3.0), Num(2.0)))


def test_parse_unary_minus_below_power():
    assert parse("-x ^ 2") == Unary("-", Binary("^", Var("x"), Num(2.0)))


def test_parse_parentheses():
    assert parse("(1 + 2) * 3") == Binary("*", Binary("+", Num(1.0), Num(2.0)), Num(3.0))


def test_parse_call_with_arguments():
    assert parse("max(a, 2)") == Call("max", (Var("a"), Num(2.0)))


def test_parse_call_without_arguments():
    assert parse("f()") == Call("f", ())


def test_parse_rejects_leftover():
    with pytest.raises(SyntaxError):
        parse("1 2")


def test_parse_rejects_unclosed():
    with pytest.raises(SyntaxError):
        parse("(1 + 2")
