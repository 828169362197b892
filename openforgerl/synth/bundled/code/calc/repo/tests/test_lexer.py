import pytest
from calc.lexer import tokenize


def texts(source):
    return [token.text for token in tokenize(source)]


def test_tokenize_expression():
    assert texts("2 * (x + 1.5)") == ["2", "*", "(", "x", "+", "1.5", ")"]


def test_tokenize_kinds():
    assert [token.kind for token in tokenize("f(a1, 3)")] == ["name", "op", "name", "op", "num", "op"]


def test_tokenize_positions():
    assert [token.position for token in tokenize("ab + 12")] == [0, 3, 5]


def test_tokenize_leading_dot_number():
    assert texts(".5+x_1") == [".5", "+", "x_1"]


def test_tokenize_rejects_two_dots():
    with pytest.raises(ValueError):
        tokenize("1.2.3")


def test_tokenize_rejects_unknown_character():
    with pytest.raises(ValueError):
        tokenize("2 $ 3")
