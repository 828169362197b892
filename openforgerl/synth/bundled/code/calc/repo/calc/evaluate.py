"""Evaluating expression trees with variables and a few functions."""

import math

from calc.parser import Binary, Call, Num, Unary, Var, parse


class CalcError(Exception):
    """An expression that parses but cannot be evaluated (unknown name, division by zero...)."""


FUNCTIONS = {"abs": (abs, 1, 1), "min": (min, 1, None), "max": (max, 1, None), "round": (round, 1, 2),
             "sqrt": (math.sqrt, 1, 1)}


def apply_binary(op, left, right):
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op in ("/", "%") and right == 0:
        raise CalcError("division by zero")
    if op == "/":
        return left / right
    if op == "%":
        return left % right
    if op == "^":
        return left ** right
    raise CalcError(f"unknown operator {op!r}")


def call(name, args):
    if name not in FUNCTIONS:
        raise CalcError(f"unknown function {name!r}")
    function, fewest, most = FUNCTIONS[name]
    if len(args) < fewest or (most is not None and len(args) > most):
        raise CalcError(f"{name} takes {fewest}..{most or 'any'} arguments, got {len(args)}")
    if name == "sqrt" and args[0] < 0:
        raise CalcError("square root of a negative number")
    if name == "round" and len(args) == 2:
        return function(args[0], int(args[1]))
    return function(*args)


def evaluate(expression, env=None):
    """The value of ``expression`` (text or tree); names are looked up in ``env``."""
    env = env or {}
    node = parse(expression) if isinstance(expression, str) else expression
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Var):
        if node.name not in env:
            raise CalcError(f"unknown variable {node.name!r}")
        return env[node.name]
    if isinstance(node, Unary):
        value = evaluate(node.operand, env)
        return -value if node.op == "-" else value
    if isinstance(node, Binary):
        return apply_binary(node.op, evaluate(node.left, env), evaluate(node.right, env))
    if isinstance(node, Call):
        return call(node.name, [evaluate(arg, env) for arg in node.args])
    raise CalcError(f"not an expression: {node!r}")


def assign(statement, env):
    """Run ``name = expression``: store the value in ``env`` and return it."""
    name, equals, expression = statement.partition("=")
    name = name.strip()
    if not equals or not name.isidentifier():
        raise SyntaxError(f"not an assignment: {statement!r}")
    if name in FUNCTIONS:
        raise CalcError(f"cannot assign to function {name!r}")
    value = evaluate(expression, env)
    env[name] = value
    return value


def variables(expression):
    """The variable names ``expression`` uses, sorted, without duplicates."""
    found = set()
    pending = [parse(expression)]
    while pending:
        node = pending.pop()
        if isinstance(node, Var):
            found.add(node.name)
        elif isinstance(node, Unary):
            pending.append(node.operand)
        elif isinstance(node, Binary):
            pending.extend([node.left, node.right])
        elif isinstance(node, Call):
            pending.extend(node.args)
    return sorted(found)
