"""Inventory with first-in-first-out lots: what is on hand, what it cost, what to reorder."""

from dataclasses import dataclass


@dataclass
class Lot:
    """``quantity`` units of a SKU received together at ``unit_cost`` cents each."""

    quantity: int
    unit_cost: int


class Inventory:
    """Lots per SKU, oldest first."""

    def __init__(self):
        self.lots = {}

    def receive(self, sku, quantity, unit_cost):
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        if unit_cost < 0:
            raise ValueError("unit cost cannot be negative")
        self.lots.setdefault(sku, []).append(Lot(quantity, unit_cost))

    def on_hand(self, sku):
        """Units of ``sku`` in stock (0 for an unknown SKU)."""
        total = 0
        for lot in self.lots.get(sku, []):
            total += lot.quantity
        return total

    def ship(self, sku, quantity):
        """Take ``quantity`` units out, oldest lots first; returns their cost in cents (FIFO).

        Shipping more than is on hand raises ValueError and changes nothing.
        """
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        if quantity > self.on_hand(sku):
            raise ValueError(f"only {self.on_hand(sku)} of {sku} on hand")
        cost = 0
        remaining = quantity
        lots = self.lots[sku]
        while remaining > 0:
            lot = lots[0]
            taken = min(lot.quantity, remaining)
            cost += taken * lot.unit_cost
            lot.quantity -= taken
            remaining -= taken
            if lot.quantity == 0:
                lots.pop(0)
        return cost

    def valuation(self):
        """The cost of everything on hand, in cents."""
        total = 0
        for lots in self.lots.values():
            for lot in lots:
                total += lot.quantity * lot.unit_cost
        return total

    def average_cost(self, sku):
        """Mean unit cost of what is on hand, rounded down to a cent; None when none is."""
        units = self.on_hand(sku)
        if units == 0:
            return None
        spent = sum(lot.quantity * lot.unit_cost for lot in self.lots[sku])
        return spent // units

    def reorder(self, levels):
        """SKUs whose stock is below their reorder level, with how many to order to reach it, by SKU."""
        orders = []
        for sku, level in sorted(levels.items()):
            have = self.on_hand(sku)
            if have < level:
                orders.append((sku, level - have))
        return orders
