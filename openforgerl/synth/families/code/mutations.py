"""SWE-smith-style mutation operators on Python source, with the stdlib ``ast`` and line-range text edits.

Each operator lists the *sites* where it can change a function (``sites(operator, function)``); a site is
one or more ``Edit``s (a character range of the source and its replacement). Functions are top-level
``def``s and methods with a cyclomatic complexity of at least ``MIN_COMPLEXITY``.

Invariant: a mutation changes only the characters of its edits — every other line of the file stays
byte-identical (formatting, comments, docstrings) — and the mutated file still parses. Sites are
listed in a fixed order, so ``(operator, function, site index)`` names one mutation for good.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

MIN_COMPLEXITY = 3
OPERATORS = ("op_change", "op_swap", "off_by_one", "remove_cond", "remove_loop", "remove_assign",
             "ctrl_invert_if", "swap_args")

BINARY_CHANGE = {"+": "-", "-": "+", "*": "/", "/": "*", "//": "/", "%": "//", "**": "*"}
COMPARE_CHANGE = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "in": "not in",
                  "not in": "in", "is": "is not", "is not": "is"}
BOOL_CHANGE = {"and": "or", "or": "and"}
SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
          ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in",
          ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.And: "and", ast.Or: "or"}
SYMMETRIC = {"*", "==", "!=", "is", "is not"}
"""Operators whose operands are not worth swapping (the swap is almost always an equivalent mutant)."""
COMMUTATIVE_CALLS = {"min", "max", "set", "frozenset"}


@dataclass(frozen=True)
class Edit:
    """Replace the characters from ``start`` to ``end`` (offsets into the source text) with ``text``."""

    start: int
    end: int
    text: str


@dataclass
class Function:
    """A function of a module that mutations may target."""

    qualname: str
    node: ast.FunctionDef
    complexity: int

    @property
    def docstring_end(self) -> int:
        """The last line of the docstring, or the ``def`` line when there is none."""
        first = self.node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            return first.end_lineno or first.lineno
        return self.node.body[0].lineno - 1


class Source:
    """A module's text with offset arithmetic (``ast`` columns are UTF-8 byte offsets)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = ast.parse(text)
        self.lines = text.splitlines(keepends=True)
        self.line_starts = [0]
        for line in self.lines:
            self.line_starts.append(self.line_starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.line_starts[lineno - 1] + len(line.encode()[:col].decode(errors="replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def whole_lines(self, node: ast.stmt) -> bool:
        """The statement alone on its lines (nothing before it, only a comment after it)."""
        end_line, end_col = node.end_lineno or node.lineno, node.end_col_offset or 0
        before = self.lines[node.lineno - 1].encode()[:node.col_offset]
        after = self.lines[end_line - 1].encode()[end_col:].decode().strip()
        return not before.strip() and (not after or after.startswith("#"))

    def line_range(self, first: int, last: int) -> tuple[int, int]:
        return self.line_starts[first - 1], self.line_starts[last]

    def indent_of(self, lineno: int) -> str:
        line = self.lines[lineno - 1]
        return line[:len(line) - len(line.lstrip())]


def apply(text: str, edits: list[Edit]) -> str:
    """``text`` with non-overlapping ``edits`` applied."""
    out, cursor = [], 0
    for edit in sorted(edits, key=lambda e: e.start):
        if edit.start < cursor:
            raise ValueError("overlapping edits")
        out += [text[cursor:edit.start], edit.text]
        cursor = edit.end
    return "".join(out) + text[cursor:]


def complexity(node: ast.AST) -> int:
    """1 + branches (if, loops, conditional expressions, handlers, comprehension filters, boolean operands)."""
    score = 1
    for child in ast.walk(node):
        if isinstance(child, (ast.If, ast.For, ast.While, ast.IfExp, ast.ExceptHandler, ast.match_case)):
            score += 1
        elif isinstance(child, ast.comprehension):
            score += 1 + len(child.ifs)
        elif isinstance(child, ast.BoolOp):
            score += len(child.values) - 1
    return score


def functions(source: Source, min_complexity: int = MIN_COMPLEXITY) -> list[Function]:
    """Top-level functions and methods, in source order, complex enough to hide a bug."""
    found = []
    for node in source.tree.body:
        members = [(node.name, node)] if isinstance(node, ast.FunctionDef) else []
        if isinstance(node, ast.ClassDef):
            members = [(f"{node.name}.{m.name}", m) for m in node.body if isinstance(m, ast.FunctionDef)]
        for qualname, func in members:
            score = complexity(func)
            if score >= min_complexity:
                found.append(Function(qualname, func, score))
    return found


def find_function(source: Source, qualname: str, min_complexity: int = MIN_COMPLEXITY) -> Function | None:
    return next((f for f in functions(source, min_complexity) if f.qualname == qualname), None)


# ---- where an operator applies ------------------------------------------------------------------

def sites(operator: str, source: Source, function: Function) -> list[list[Edit]]:
    """Every mutation ``operator`` can make in ``function``, in source order (risky loops left out)."""
    if operator not in OPERATORS:
        raise ValueError(f"unknown mutation operator {operator!r}; known: {', '.join(OPERATORS)}")
    risky = _loop_counters(source, function.node)
    nodes = [function.node, *_body_nodes(function)]
    return [edits for node in nodes for edits in SITE_MAKERS[operator](source, node)
            if not any(_endangers(edit, counter, loop) for edit in edits for counter, loop in risky)]


def _body_nodes(function: Function) -> list[ast.AST]:
    """The nodes of the function's body after its docstring, sorted by position."""
    nodes = [n for stmt in function.node.body for n in ast.walk(stmt)
             if hasattr(n, "lineno") and n.lineno > function.docstring_end]
    return sorted(nodes, key=lambda n: (n.lineno, n.col_offset, -n.end_lineno, -n.end_col_offset))  # type: ignore


Span = tuple[int, int]


def _loop_counters(source: Source, function: ast.FunctionDef) -> list[tuple[Span, Span]]:
    """(statement, its loop) for statements that update a name a ``while`` loop tests: changing them
    (but not dropping the whole loop) may make the loop run for ever."""
    found = []
    for loop in (n for n in ast.walk(function) if isinstance(n, ast.While)):
        tested = {n.id for n in ast.walk(loop.test) if isinstance(n, ast.Name)}
        tested |= {n.attr for n in ast.walk(loop.test) if isinstance(n, ast.Attribute)}
        for stmt in (n for n in ast.walk(loop) if isinstance(n, (ast.Assign, ast.AugAssign))):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            names |= {n.attr for t in targets for n in ast.walk(t) if isinstance(n, ast.Attribute)}
            if names & tested:
                found.append((source.span(stmt), source.span(loop)))
    return found


def _endangers(edit: Edit, counter: Span, loop: Span) -> bool:
    touches = edit.start < counter[1] and edit.end > counter[0]
    return touches and not (edit.start <= loop[0] and edit.end >= loop[1])


def _operator_edit(source: Source, left: ast.AST, right: ast.AST, symbol: str, replacement: str) -> list[Edit]:
    """The edit turning the operator token between ``left`` and ``right`` into ``replacement``."""
    start, end = source.span(left)[1], source.span(right)[0]
    between = source.text[start:end]
    core = between.strip(" \t\n()\\")
    if " ".join(core.split()) != symbol:
        return []
    at = start + between.index(core)
    return [Edit(at, at + len(core), replacement)]


def _op_change(source: Source, node: ast.AST) -> Iterator[list[Edit]]:
    if isinstance(node, ast.BinOp) and type(node.op) in SYMBOL and SYMBOL[type(node.op)] in BINARY_CHANGE:
        symbol = SYMBOL[type(node.op)]
        edits = _operator_edit(source, node.left, node.right, symbol, BINARY_CHANGE[symbol])
    elif isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        for index, op in enumerate(node.ops):
            symbol = SYMBOL[type(op)]
            edits = _operator_edit(source, operands[index], operands[index + 1], symbol, COMPARE_CHANGE[symbol])
            if edits:
                yield edits
        return
    elif isinstance(node, ast.BoolOp):
        symbol = SYMBOL[type(node.op)]
        edits = _operator_edit(source, node.values[0], node.values[1], symbol, BOOL_CHANGE[symbol])
    elif isinstance(node, ast.AugAssign) and type(node.op) in (ast.Add, ast.Sub):
        symbol = SYMBOL[type(node.op)] + "="
        edits = _operator_edit(source, node.target, node.value, symbol, BINARY_CHANGE[symbol[0]] + "=")
    else:
        return
    if edits:
        yield edits


def _swap(source: Source, first: ast.AST, second: ast.AST) -> list[Edit]:
    if first.lineno != second.end_lineno:  # type: ignore[attr-defined]
        return []
    a, b = source.span(first), source.span(second)
    text_a, text_b = source.text[a[0]:a[1]], source.text[b[0]:b[1]]
    if text_a == text_b:
        return []
    return [Edit(a[0], a[1], text_b), Edit(b[0], b[1], text_a)]


def _op_swap(source: Source, node: ast.AST) -> Iterator[list[Edit]]:
    if isinstance(node, ast.BinOp) and SYMBOL.get(type(node.op)) not in SYMMETRIC | {None}:
        edits = _swap(source, node.left, node.right)
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and SYMBOL[type(node.ops[0])] not in SYMMETRIC:
        edits = _swap(source, node.left, node.comparators[0])
    else:
        return
    if edits:
        yield edits


def _off_by_one(source: Source, node: ast.AST) -> Iterator[list[Edit]]:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        start, end = source.span(node)
        for delta in (1, -1):
            if node.value + delta >= 0:
                yield [Edit(start, end, str(node.value + delta))]


def _statement_removal(source: Source, node: ast.stmt, siblings: list[ast.stmt]) -> list[Edit]:
    if not source.whole_lines(node):
        return []
    start, end = source.line_range(node.lineno, node.end_lineno or node.lineno)
    elif_branch = source.lines[node.lineno - 1].lstrip().startswith("elif")
    alone = len(siblings) == 1 and not elif_branch
    return [Edit(start, end, f"{source.indent_of(node.lineno)}pass\n" if alone else "")]


def _statements_with_siblings(node: ast.AST) -> Iterator[tuple[ast.stmt, list[ast.stmt]]]:
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if isinstance(block, list):
            for stmt in block:
                if isinstance(stmt, ast.stmt):
                    yield stmt, block


def _remove(kinds: tuple[type, ...]):
    def maker(source: Source, node: ast.AST) -> Iterator[list[Edit]]:
        for stmt, siblings in _statements_with_siblings(node):
            if isinstance(stmt, kinds) and not _exits_a_while(node, stmt):
                if isinstance(stmt, ast.If) and stmt.orelse:
                    continue
                if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
                    continue
                edits = _statement_removal(source, stmt, siblings)
                if edits:
                    yield edits
    return maker


def _exits_a_while(parent: ast.AST, stmt: ast.stmt) -> bool:
    """An ``if`` that breaks out of (or returns from) a ``while`` loop: without it the loop may not end."""
    return isinstance(parent, ast.While) and isinstance(stmt, ast.If) and \
        any(isinstance(n, (ast.Break, ast.Return)) for n in ast.walk(stmt))


def _ctrl_invert_if(source: Source, node: ast.AST) -> Iterator[list[Edit]]:
    if isinstance(node, ast.IfExp):  # a if test else b -> b if test else a
        edits = _swap(source, node.body, node.orelse)
        if edits:
            yield edits
        return
    if not isinstance(node, ast.If) or not node.orelse:
        return
    body, orelse = node.body, node.orelse
    if source.lines[orelse[0].lineno - 1].lstrip().startswith("elif") or body[0].lineno == node.lineno:
        return
    if not all(source.whole_lines(s) for s in (body[0], body[-1], orelse[0], orelse[-1])):
        return
    if source.indent_of(body[0].lineno) != source.indent_of(orelse[0].lineno):
        return
    body_end, else_start = body[-1].end_lineno or body[-1].lineno, orelse[0].lineno
    if else_start <= body_end + 1:
        return
    then_start, then_end = source.line_range(body[0].lineno, body_end)
    middle_end = source.line_starts[else_start - 1]
    else_from, else_to = source.line_range(else_start, orelse[-1].end_lineno or orelse[-1].lineno)
    then_text, middle, else_text = (source.text[then_start:then_end], source.text[then_end:middle_end],
                                    source.text[else_from:else_to])
    if then_text != else_text:
        yield [Edit(then_start, else_to, else_text + middle + then_text)]


def _swap_args(source: Source, node: ast.AST) -> Iterator[list[Edit]]:
    if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args):
        return
    if isinstance(node.func, ast.Name) and node.func.id in COMMUTATIVE_CALLS:
        return
    for first, second in zip(node.args, node.args[1:], strict=False):
        edits = _swap(source, first, second)
        if edits:
            yield edits


SITE_MAKERS = {
    "op_change": _op_change, "op_swap": _op_swap, "off_by_one": _off_by_one,
    "remove_cond": _remove((ast.If,)), "remove_loop": _remove((ast.For, ast.While)),
    "remove_assign": _remove((ast.Assign, ast.AugAssign, ast.AnnAssign)),
    "ctrl_invert_if": _ctrl_invert_if, "swap_args": _swap_args,
}


def mutate(text: str, operator: str, qualname: str, site: int) -> str:
    """``text`` with site ``site`` of ``operator`` in ``qualname`` applied; ValueError when there is none."""
    source = Source(text)
    function = find_function(source, qualname)
    if function is None:
        raise ValueError(f"no function {qualname!r} with complexity >= {MIN_COMPLEXITY}")
    found = sites(operator, source, function)
    if not 0 <= site < len(found):
        raise ValueError(f"{operator} has {len(found)} sites in {qualname}, not a site {site}")
    mutated = apply(text, found[site])
    ast.parse(mutated)
    return mutated


# ---- whole-body rewrites (implement-a-function, failure cases) ----------------------------------

def replace_body(text: str, qualname: str, body: str, min_complexity: int = 1) -> str:
    """``text`` with the body of ``qualname`` after its docstring replaced by ``body`` (one line per
    statement, indented like the body); the signature and docstring stay byte-identical."""
    source = Source(text)
    function = find_function(source, qualname, min_complexity)
    if function is None:
        raise ValueError(f"no function {qualname!r}")
    first = next(s for s in function.node.body if s.lineno > function.docstring_end)
    indent = source.indent_of(first.lineno)
    start, end = source.line_range(first.lineno, function.node.end_lineno or first.lineno)
    lines = "".join(f"{indent}{line}\n" for line in body.splitlines())
    return text[:start] + lines + text[end:]


def returns_value(function: Function) -> bool:
    return any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(function.node))


def first_if_removed(text: str, qualname: str) -> str | None:
    """The function with its first removable ``if`` statement dropped (a partial job), or None."""
    source = Source(text)
    function = find_function(source, qualname, 1)
    if function is None:
        return None
    found = sites("remove_cond", source, function)
    return apply(text, found[0]) if found else None


# ---- test modules -------------------------------------------------------------------------------

def test_function(text: str, name: str) -> ast.FunctionDef | None:
    """A top-level test function (or ``Class.method``) of a test module."""
    owner, _, method = name.rpartition(".")
    for node in ast.parse(text).body:
        if not owner and isinstance(node, ast.FunctionDef) and node.name == name:
            return node
        if owner and isinstance(node, ast.ClassDef) and node.name == owner:
            return next((m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == method), None)
    return None


def strip_tests(text: str, names: set[str]) -> str:
    """The test module without the test functions ``names`` (decorators and the blank lines before them too)."""
    source = Source(text)
    edits = []
    for name in sorted(names):
        node = test_function(text, name)
        if node is None:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        while first > 1 and not source.lines[first - 2].strip():
            first -= 1
        start, end = source.line_range(first, node.end_lineno or node.lineno)
        edits.append(Edit(start, end, ""))
    stripped = apply(text, edits)
    ast.parse(stripped)
    return stripped


def test_snippet(text: str, name: str) -> str | None:
    """A test function's body, dedented, after what it needs from its module (imports, constants, helpers),
    so it runs on its own; None for parametrised tests or fixtures."""
    node = test_function(text, name)
    if node is None or node.args.args or node.decorator_list:
        return None
    source = Source(text)
    start, end = source.line_range(node.body[0].lineno, node.end_lineno or node.lineno)
    indent = source.indent_of(node.body[0].lineno)
    lines = [line[len(indent):] if line.startswith(indent) else line.lstrip()
             for line in source.text[start:end].splitlines()]
    return "\n".join([*_module_context(source, node), *lines])


def _module_context(source: Source, node: ast.FunctionDef) -> list[str]:
    """The module's imports, assignments and helper functions that ``node`` uses, directly or not."""
    wanted = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    imports: list[str] = []
    definitions: list[ast.stmt] = []
    for stmt in reversed(source.tree.body):  # helpers come before their users: walk back, collecting needs
        if isinstance(stmt, (ast.FunctionDef, ast.Assign)) and stmt is not node:
            defined = {stmt.name} if isinstance(stmt, ast.FunctionDef) else \
                {n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if defined & wanted:
                definitions.insert(0, stmt)
                wanted |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    for stmt in source.tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module:
            names = [a.name for a in stmt.names if (a.asname or a.name) in wanted]
            if names:
                imports.append(f"from {stmt.module} import {', '.join(names)}")
        elif isinstance(stmt, ast.Import):
            imports += [f"import {a.name}" for a in stmt.names if (a.asname or a.name).split(".")[0] in wanted]
    blocks = [source.segment(stmt) for stmt in definitions]
    return [*imports, *([""] if imports else []), *("\n".join(blocks).splitlines()), *([""] if blocks else [])]
