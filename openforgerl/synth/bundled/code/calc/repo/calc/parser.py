"""Precedence-climbing parser from tokens to a small expression tree."""

from dataclasses import dataclass

from calc.lexer import tokenize

BINARY = {"+": (1, "left"), "-": (1, "left"), "*": (2, "left"), "/": (2, "left"), "%": (2, "left"),
          "^": (4, "right")}
UNARY_PRECEDENCE = 3


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Unary:
    op: str
    operand: object


@dataclass(frozen=True)
class Binary:
    op: str
    left: object
    right: object


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple


class Parser:
    def __init__(self, text):
        self.tokens = tokenize(text)
        self.index = 0

    def peek(self):
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self, text=None):
        token = self.peek()
        if token is None:
            raise SyntaxError("unexpected end of expression")
        if text is not None and token.text != text:
            raise SyntaxError(f"expected {text!r} at {token.position}, found {token.text!r}")
        self.index += 1
        return token

    def expression(self, min_precedence=1):
        """Binary operators at or above ``min_precedence``, climbing for tighter ones."""
        left = self.unary()
        while True:
            token = self.peek()
            if token is None or token.kind != "op" or token.text not in BINARY:
                return left
            precedence, associativity = BINARY[token.text]
            if precedence < min_precedence:
                return left
            self.take()
            next_min = precedence + 1 if associativity == "left" else precedence
            right = self.expression(next_min)
            left = Binary(token.text, left, right)

    def unary(self):
        token = self.peek()
        if token is not None and token.text in ("-", "+"):
            self.take()
            return Unary(token.text, self.expression(UNARY_PRECEDENCE))
        return self.primary()

    def primary(self):
        token = self.take()
        if token.kind == "num":
            return Num(float(token.text))
        if token.kind == "name":
            following = self.peek()
            if following is not None and following.text == "(":
                return Call(token.text, self.arguments())
            return Var(token.text)
        if token.text == "(":
            inner = self.expression()
            self.take(")")
            return inner
        raise SyntaxError(f"unexpected {token.text!r} at {token.position}")

    def arguments(self):
        self.take("(")
        args = []
        following = self.peek()
        if following is not None and following.text == ")":
            self.take()
            return tuple(args)
        while True:
            args.append(self.expression())
            if self.take().text == ")":
                return tuple(args)


def parse(text):
    """The tree of ``text``; SyntaxError when it is not one complete expression."""
    parser = Parser(text)
    tree = parser.expression()
    leftover = parser.peek()
    if leftover is not None:
        raise SyntaxError(f"unexpected {leftover.text!r} at {leftover.position}")
    return tree
