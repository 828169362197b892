"""ledger: money in cents, a double-entry book of accounts and a FIFO inventory."""

from ledger.book import Book, Entry
from ledger.money import format_amount, parse_amount, percent_of, split_evenly
from ledger.stock import Inventory, Lot

__all__ = ["Book", "Entry", "Inventory", "Lot", "format_amount", "parse_amount", "percent_of", "split_evenly"]
