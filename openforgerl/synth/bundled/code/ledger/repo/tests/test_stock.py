import pytest
from ledger.stock import Inventory


def stocked():
    inventory = Inventory()
    inventory.receive("pen", 10, 100)
    inventory.receive("pen", 5, 120)
    inventory.receive("pad", 4, 250)
    return inventory


def test_on_hand():
    assert stocked().on_hand("pen") == 15


def test_on_hand_unknown():
    assert stocked().on_hand("ink") == 0


def test_receive_rejects_zero():
    with pytest.raises(ValueError):
        stocked().receive("pen", 0, 100)


def test_ship_fifo_cost_across_lots():
    assert stocked().ship("pen", 12) == 10 * 100 + 2 * 120


def test_ship_leaves_the_rest():
    inventory = stocked()
    inventory.ship("pen", 12)
    assert inventory.on_hand("pen") == 3


def test_ship_whole_lot_then_next_lot_price():
    inventory = stocked()
    inventory.ship("pen", 10)
    assert inventory.ship("pen", 1) == 120


def test_ship_too_many_changes_nothing():
    inventory = stocked()
    with pytest.raises(ValueError):
        inventory.ship("pad", 5)
    assert inventory.on_hand("pad") == 4


def test_valuation():
    assert stocked().valuation() == 10 * 100 + 5 * 120 + 4 * 250


def test_average_cost_rounds_down():
    assert stocked().average_cost("pen") == 106


def test_average_cost_of_nothing():
    assert stocked().average_cost("ink") is None


def test_reorder_below_level():
    assert stocked().reorder({"pen": 20, "pad": 4, "ink": 3}) == [("ink", 3), ("pen", 5)]
