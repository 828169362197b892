"""Task families on the shop: buy products with a shipping address, find the cheapest or dearest product of
a category (answer form), cancel an order.

Orders are judged by content, not id: exactly one new live order with the asked-for address and lines
(an order the agent placed by mistake and cancelled does not count against it), and every seeded
order exactly as it was.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from openforgerl.synth.assets import Asset
from openforgerl.synth.families.gui.base import (
    NEEDED_ACTIONS,
    SOLVE_PRELUDE,
    GuiFamily,
    all_of,
    answer_check,
    app_module,
    check,
    column,
    curl,
    database,
    missing,
    query_param,
    record_answer,
    rows,
    submit_answer,
    unchanged,
)
from openforgerl.synth.family import Effect, TaskDraft

CUSTOMERS = ["Mary Somerville", "Hedy Lamarr", "Claude Shannon", "Radia Perlman", "John von Neumann",
             "Frances Allen", "Donald Knuth", "Margaret Hamilton", "Tim Berners-Lee", "Sophie Wilson"]
STREETS = ["7 Comet Close", "19 Lantern Row", "4 Quarry Hill", "62 Mill Lane", "15 Orchard Walk", "33 Ferry Road",
           "9 Beacon Street", "27 Willow Crescent"]
CITIES = ["Oxford", "Brighton", "Leeds", "Norwich", "Bath", "Exeter", "York", "Dundee"]
ORDERS_WITH_ITEMS = ("SELECT o.id, o.name, o.street, o.city, o.status, i.product_id, i.quantity FROM orders o "
                     "JOIN order_items i ON i.order_id = o.id{where} ORDER BY o.id, i.product_id")
DESCRIPTION = "shop"


def product_names(state: Path, category: str | None = None) -> list[str]:
    if category is None:
        return column(state, "SELECT name FROM products ORDER BY id")
    return column(state, "SELECT name FROM products WHERE category = ? ORDER BY id", [category])


def categories(state: Path) -> list[str]:
    return column(state, "SELECT DISTINCT category FROM products ORDER BY category")


def category_of(state: Path, product: str) -> str:
    return str(column(state, "SELECT category FROM products WHERE name = ?", [product])[0])


def last_order(state: Path) -> int:
    return int(column(state, "SELECT max(id) FROM orders")[0])


def placed_orders(state: Path) -> list[int]:
    return column(state, "SELECT id FROM orders WHERE status = 'placed' ORDER BY id")


class ShopFamily(GuiFamily):
    app = "shop"

    def change(self, asset: Asset, action: Any) -> Effect:
        """An effect that runs ``action(store, db)`` on the host copy, as one request would."""
        def effect(root: Path) -> None:
            with database(root) as db:
                action(app_module(asset, "store"), db)
        return effect

    def order(self, asset: Asset, name: str, street: str, city: str, lines: list[tuple[str, int]]) -> Effect:
        return self.change(asset, lambda store, db: store.place_order(
            db, name, street, city, [(store.product_id(db, product), quantity) for product, quantity in lines]))


def then(*effects: Effect) -> Effect:
    def effect(root: Path) -> None:
        for one in effects:
            one(root)
    return effect


class BuyProducts(ShopFamily):
    """One order of one or two products, with quantities, shipped to a given address."""

    name = "gui.shop.buy"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        products = rng.sample(product_names(state), rng.choice([1, 1, 2]))
        return {"items": [{"product": p, "quantity": rng.randint(1, 4)} for p in products],
                "name": rng.choice(CUSTOMERS), "street": rng.choice(STREETS), "city": rng.choice(CITIES),
                "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        line = {"type": "object", "required": ["product", "quantity"], "properties": {
            "product": {"enum": product_names(state)}, "quantity": {"type": "integer", "minimum": 1, "maximum": 9}}}
        text = {"type": "string", "minLength": 2, "maxLength": 60}
        return {"type": "object", "required": ["items", "name", "street", "city"], "properties": {
            "items": {"type": "array", "items": line, "minItems": 1, "maxItems": 2},
            "name": text, "street": text, "city": text}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        items = params.get("items")
        if not isinstance(items, list) or not 1 <= len(items) <= 2 or not all(isinstance(i, dict) for i in items):
            return "items must be a list of one or two {product, quantity} objects"
        for line in items:
            if line.get("product") not in product_names(state):
                return missing("product", line.get("product"), product_names(state))
            if not isinstance(line.get("quantity"), int) or not 1 <= line["quantity"] <= 9:
                return f"the quantity {line.get('quantity')!r} must be a whole number from 1 to 9"
        if len({line["product"] for line in items}) != len(items):
            return "the same product is listed twice"
        for key in ("name", "street", "city"):
            value = params.get(key)
            if not isinstance(value, str) or not 2 <= len(value) <= 60 or value != " ".join(value.split()):
                return f"the {key} {value!r} must be 2 to 60 characters on one line"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        lines = [(line["product"], int(line["quantity"])) for line in params["items"]]
        name, street, city = params["name"], params["street"], params["city"]
        what = " and ".join(f'{quantity} of "{product}"' for product, quantity in lines)
        one_order = len(lines) > 1  # several lines: say they go in one order
        wording = [f"Order {what}{' in one order' * one_order}, shipped to {name}, {street}, {city}.",
                   f"Buy {what} for {name} (shipping address: {street}, {city}){' as a single order' * one_order}."
                   ][self.wording(params)]
        last = last_order(state)
        live = f"o.id > {last} AND o.status = 'placed'"
        spec = all_of(
            check("order", f"SELECT o.name, o.street, o.city FROM orders o WHERE {live}", [[name, street, city]]),
            check("order_lines", "SELECT p.name, i.quantity FROM order_items i JOIN orders o ON o.id = i.order_id "
                  f"JOIN products p ON p.id = i.product_id WHERE {live} ORDER BY p.name",
                  [[product, quantity] for product, quantity in sorted(lines)]),
            unchanged("earlier_orders_unchanged", ORDERS_WITH_ITEMS.format(where=f" WHERE o.id <= {last}"), state))
        first, quantity = lines[0]
        substitute = next(p for p in product_names(state, category_of(state, first)) if p not in dict(lines))
        placed = placed_orders(state)[0]
        right = self.order(asset, name, street, city, lines)
        failures = {
            "wrong_quantity": self.order(asset, name, street, city, [(first, quantity % 4 + 1), *lines[1:]]),
            "wrong_product": self.order(asset, name, street, city, [(substitute, quantity), *lines[1:]]),
            "wrong_city": self.order(asset, name, street, next(c for c in CITIES if c != city), lines),
            "ordered_twice": then(right, right),
            "plus_cancelled_order": then(right, self.change(asset, lambda s, db: s.cancel_order(db, placed)))}
        if len(lines) > 1:
            failures["split_orders"] = then(*(self.order(asset, name, street, city, [line]) for line in lines))
        payload = {"name": name, "street": street, "city": city,
                   "items": [{"product": product, "quantity": quantity} for product, quantity in lines]}
        return TaskDraft(
            title=f"Buy {what}", instruction=f"{self.where(DESCRIPTION)} {wording}", spec=spec,
            required_literals=[*(p for p, _ in lines), *(f"{q} of" for _, q in lines), name, street, city],
            solution=SOLVE_PRELUDE + curl("POST", "api/orders", payload) + "\n", oracle=right,
            failure_cases=failures, difficulty="medium" if len(lines) > 1 else "easy", needed_actions=NEEDED_ACTIONS)


class PriceExtreme(ShopFamily):
    """The cheapest (or most expensive) product of a category, named on the Answer page."""

    name = "gui.shop.price_extreme"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        return {"category": rng.choice(categories(state)), "extreme": rng.choice(["cheapest", "most expensive"]),
                "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["category", "extreme"], "properties": {
            "category": {"enum": categories(state)}, "extreme": {"enum": ["cheapest", "most expensive"]}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if params.get("category") not in categories(state):
            return missing("category", params.get("category"), categories(state))
        if params.get("extreme") not in ("cheapest", "most expensive"):
            return f"extreme must be 'cheapest' or 'most expensive', not {params.get('extreme')!r}"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        category, extreme = params["category"], params["extreme"]

        def pick(of_category: str, which: str) -> str:
            order = "ASC" if which == "cheapest" else "DESC"
            return str(column(state, f"SELECT name FROM products WHERE category = ? ORDER BY price_cents {order}",
                              [of_category])[0])

        answer = pick(category, extreme)
        other_extreme = pick(category, "most expensive" if extreme == "cheapest" else "cheapest")
        other_category = pick(next(c for c in categories(state) if c != category), extreme)
        wording = [f"Which product in the {category} category is the {extreme}?",
                   f"Find the {extreme} product the shop sells in the {category} category."][self.wording(params)]
        instruction = (f"{self.where(DESCRIPTION)} {wording} Submit its name, exactly as the shop shows it, on the "
                       "app's Answer page (only your latest answer counts). Do not place an order.")
        spec = all_of(answer_check(answer), unchanged("orders_unchanged", ORDERS_WITH_ITEMS.format(where=""), state))

        def say(text: str) -> Effect:
            return lambda root: record_answer(root, asset, text)

        bought = self.order(asset, CUSTOMERS[0], STREETS[0], CITIES[0], [(answer, 1)])
        jq_pick = "min_by(.price_cents)" if extreme == "cheapest" else "max_by(.price_cents)"
        solution = (SOLVE_PRELUDE + f"name=$({curl('GET', f'api/products?category={query_param(category)}')} "
                    f"| jq -r '{jq_pick} | .name')\n" + submit_answer("name"))
        return TaskDraft(
            title=f"The {extreme} product in {category}", instruction=instruction, spec=spec,
            required_literals=[category, extreme], solution=solution, oracle=say(answer),
            failure_cases={"other_extreme": say(other_extreme), "other_category": say(other_category),
                           "right_but_bought": then(say(answer), bought)},
            difficulty="medium", needed_actions=NEEDED_ACTIONS)


class CancelOrder(ShopFamily):
    """Cancel one placed order, leaving every other order as it is."""

    name = "gui.shop.cancel"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        return {"order": rng.choice(placed_orders(state)), "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["order"], "properties": {"order": {"enum": placed_orders(state)}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if params.get("order") not in placed_orders(state):
            return missing("order that can still be cancelled, numbered", params.get("order"), placed_orders(state))
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        order_id = int(params["order"])
        [[customer]] = rows(state, "SELECT name FROM orders WHERE id = ?", [order_id])
        wording = [f"Cancel order #{order_id} (placed by {customer}).",
                   f"{customer} no longer wants order #{order_id}: cancel it in the shop."][self.wording(params)]
        spec = all_of(check("order_cancelled", f"SELECT status FROM orders WHERE id = {order_id}", [["cancelled"]]),
                      unchanged("other_orders_unchanged",
                                f"SELECT id, name, street, city, status FROM orders WHERE id <> {order_id} ORDER BY id",
                                state),
                      unchanged("order_lines_unchanged",
                                "SELECT order_id, product_id, quantity FROM order_items ORDER BY order_id, product_id",
                                state))

        def cancel(*which: int) -> Effect:
            return then(*(self.change(asset, lambda s, db, one=one: s.cancel_order(db, one)) for one in which))

        other = next(o for o in placed_orders(state) if o != order_id)
        [[name, street, city]] = rows(state, "SELECT name, street, city FROM orders WHERE id = ?", [order_id])
        items = rows(state, "SELECT p.name, i.quantity FROM order_items i JOIN products p "
                            "ON p.id = i.product_id WHERE i.order_id = ?", [order_id])
        lines = [(str(p), int(q)) for p, q in items]
        return TaskDraft(
            title=f"Cancel order #{order_id}", instruction=f"{self.where(DESCRIPTION)} {wording}", spec=spec,
            required_literals=[f"#{order_id}", customer],
            solution=SOLVE_PRELUDE + curl("POST", f"api/orders/{order_id}/cancel") + "\n", oracle=cancel(order_id),
            failure_cases={"cancelled_other": cancel(other),
                           "cancelled_every_open_order": cancel(*placed_orders(state)),
                           "cancelled_and_reordered": then(cancel(order_id),
                                                           self.order(asset, name, street, city, lines))},
            difficulty="easy", needed_actions=NEEDED_ACTIONS)
