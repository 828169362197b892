"""Turning expression text into tokens."""

from dataclasses import dataclass

OPERATORS = "+-*/%^(),="


@dataclass(frozen=True)
class Token:
    """``kind`` is ``num``, ``name`` or ``op``; ``position`` is the offset in the text."""

    kind: str
    text: str
    position: int


def tokenize(text):
    """The tokens of ``text``; whitespace separates tokens and is otherwise ignored.

    Numbers are digits with at most one decimal point (``12``, ``0.5``, ``.5``); names start with a
    letter or underscore. Anything else raises ValueError naming the character and its position.
    """
    tokens = []
    index = 0
    while index < len(text):
        char = text[index]
        if char.isspace():
            index += 1
        elif char.isdigit() or char == ".":
            start = index
            dots = 0
            while index < len(text) and (text[index].isdigit() or text[index] == "."):
                if text[index] == ".":
                    dots += 1
                index += 1
            number = text[start:index]
            if dots > 1 or number == ".":
                raise ValueError(f"bad number {number!r} at {start}")
            tokens.append(Token("num", number, start))
        elif char.isalpha() or char == "_":
            start = index
            while index < len(text) and (text[index].isalnum() or text[index] == "_"):
                index += 1
            tokens.append(Token("name", text[start:index], start))
        elif char in OPERATORS:
            tokens.append(Token("op", char, index))
            index += 1
        else:
            raise ValueError(f"unexpected character {char!r} at {index}")
    return tokens
