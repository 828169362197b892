import pytest
from calc.evaluate import CalcError, assign, evaluate, variables


def test_arithmetic():
    assert evaluate("1 + 2 * 3 - 4 / 2") == 5.0


def test_modulo_and_power():
    assert evaluate("17 % 5 + 2 ^ 3") == 10.0


def test_power_chain():
    assert evaluate("2 ^ 3 ^ 2") == 512.0


def test_negative_power():
    assert evaluate("-2 ^ 2") == -4.0


def test_subtraction_order():
    assert evaluate("10 - 4 - 3") == 3.0


def test_division_order():
    assert evaluate("64 / 8 / 2") == 4.0


def test_variables():
    assert evaluate("price * qty", {"price": 2.5, "qty": 4}) == 10.0


def test_unknown_variable():
    with pytest.raises(CalcError):
        evaluate("y + 1")


def test_division_by_zero():
    with pytest.raises(CalcError):
        evaluate("1 / (2 - 2)")


def test_functions():
    assert evaluate("max(1, 7, 3) + min(4, 2) + abs(-3)") == 12.0


def test_round_with_digits():
    assert evaluate("round(3.14159, 2)") == 3.14


def test_sqrt():
    assert evaluate("sqrt(16)") == 4.0


def test_sqrt_of_negative():
    with pytest.raises(CalcError):
        evaluate("sqrt(-1)")


def test_wrong_argument_count():
    with pytest.raises(CalcError):
        evaluate("abs(1, 2)")


def test_unknown_function():
    with pytest.raises(CalcError):
        evaluate("cube(2)")


def test_assign_stores_value():
    env = {"x": 2}
    assert assign("y = x * 5", env) == 10
    assert env["y"] == 10


def test_assign_rejects_function_name():
    with pytest.raises(CalcError):
        assign("max = 3", {})


def test_assign_rejects_non_assignment():
    with pytest.raises(SyntaxError):
        assign("3 + 4", {})


def test_variables_listed_once():
    assert variables("a * b + max(a, c) - -b") == ["a", "b", "c"]
