"""calc: a tiny arithmetic expression language."""

from calc.evaluate import CalcError, assign, evaluate
from calc.lexer import Token, tokenize
from calc.parser import parse

__all__ = ["CalcError", "Token", "assign", "evaluate", "parse", "tokenize"]
