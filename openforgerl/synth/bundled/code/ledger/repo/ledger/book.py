"""A double-entry book: every posting moves an amount from one account to another."""

from dataclasses import dataclass

KINDS = ("asset", "liability", "equity", "income", "expense")
DEBIT_NORMAL = ("asset", "expense")


@dataclass(frozen=True)
class Entry:
    """One posting: ``amount`` cents debited to ``debit`` and credited to ``credit``."""

    number: int
    debit: str
    credit: str
    amount: int
    memo: str = ""


class Book:
    """Accounts by name with their kind, and the postings between them, in order."""

    def __init__(self):
        self.kinds = {}
        self.entries = []

    def open_account(self, name, kind):
        if kind not in KINDS:
            raise ValueError(f"unknown account kind: {kind!r}")
        if name in self.kinds:
            raise ValueError(f"account exists: {name!r}")
        self.kinds[name] = kind

    def post(self, debit, credit, amount, memo=""):
        """Record a posting and return it; both accounts must exist and differ, amount > 0."""
        for name in (debit, credit):
            if name not in self.kinds:
                raise KeyError(name)
        if debit == credit:
            raise ValueError("debit and credit accounts are the same")
        if amount <= 0:
            raise ValueError("amount must be positive")
        entry = Entry(len(self.entries) + 1, debit, credit, amount, memo)
        self.entries.append(entry)
        return entry

    def balance(self, name):
        """The account's balance in its normal direction (debits up for assets and expenses)."""
        if name not in self.kinds:
            raise KeyError(name)
        debits = 0
        credits = 0
        for entry in self.entries:
            if entry.debit == name:
                debits += entry.amount
            elif entry.credit == name:
                credits += entry.amount
        if self.kinds[name] in DEBIT_NORMAL:
            return debits - credits
        return credits - debits

    def trial_balance(self):
        """(total debits, total credits) over the accounts' balances; equal in a sound book."""
        debit_total = 0
        credit_total = 0
        for name, kind in sorted(self.kinds.items()):
            amount = self.balance(name)
            debit_side = kind in DEBIT_NORMAL
            if amount < 0:
                debit_side = not debit_side
                amount = -amount
            if debit_side:
                debit_total += amount
            else:
                credit_total += amount
        return debit_total, credit_total

    def statement(self, name):
        """The account's postings as (entry number, signed amount, running balance), in order."""
        if name not in self.kinds:
            raise KeyError(name)
        sign = 1 if self.kinds[name] in DEBIT_NORMAL else -1
        running = 0
        lines = []
        for entry in self.entries:
            if name not in (entry.debit, entry.credit):
                continue
            change = entry.amount if entry.debit == name else -entry.amount
            running += sign * change
            lines.append((entry.number, sign * change, running))
        return lines

    def net_income(self):
        """Income minus expenses."""
        total = 0
        for name, kind in self.kinds.items():
            if kind == "income":
                total += self.balance(name)
            elif kind == "expense":
                total -= self.balance(name)
        return total
