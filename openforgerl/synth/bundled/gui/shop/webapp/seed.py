"""The shop's starting data: always the same catalogue and orders (a fixed seed), so tasks can be checked.

    python3 seed.py --root /        # at image build; --root DIR for a copy on another machine
"""

import random

import store
import webkit

SEED = 20270302
CATALOGUE = {
    "Tea": ["Jasmine Green Tea", "Earl Grey Tea", "Rooibos Vanilla Tea", "Peppermint Tea", "Assam Breakfast Tea"],
    "Coffee": ["Colombia Whole Beans", "Ethiopia Ground Coffee", "Decaf Espresso Beans", "Cold Brew Bags",
               "Guatemala Filter Coffee"],
    "Stationery": ["Dotted Notebook A5", "Fountain Pen", "Gel Pens (Pack of 5)", "Sticky Notes", "Desk Planner"],
    "Kitchen": ["Enamel Mug", "Bamboo Cutting Board", "Glass Teapot", "Milk Frother", "Ceramic Pour-Over"],
    "Garden": ["Herb Seed Kit", "Watering Can", "Pruning Shears", "Garden Gloves", "Bird Feeder"],
}
CUSTOMERS = [("Ada Lovelace", "12 Elm Street", "Springfield"), ("Alan Turing", "3 Bletchley Road", "Milton"),
             ("Grace Hopper", "88 Harbor Lane", "Arlington"), ("Katherine Johnson", "5 Orbit Way", "Hampton"),
             ("Edsger Dijkstra", "21 Canal Street", "Nuenen"), ("Barbara Liskov", "40 Substitution Ave", "Cambridge")]
STATUSES = ["placed", "shipped", "placed", "cancelled", "placed", "shipped"]


def populate(db):
    rng = random.Random(SEED)
    prices = rng.sample(range(250, 4500, 5), sum(len(names) for names in CATALOGUE.values()))  # all distinct
    for category, names in CATALOGUE.items():
        for name in names:
            db.execute("INSERT INTO products (name, category, price_cents, description) VALUES (?, ?, ?, ?)",
                       (name, category, prices.pop(), f"{name}, from our {category.lower()} range."))
    product_ids = [row[0] for row in db.execute("SELECT id FROM products ORDER BY id")]
    for (name, street, city), status in zip(CUSTOMERS, STATUSES, strict=True):
        items = [(pid, rng.randint(1, 3)) for pid in rng.sample(product_ids, rng.randint(1, 3))]
        order_id = store.place_order(db, name, street, city, items)
        store.set_status(db, order_id, status)


if __name__ == "__main__":
    webkit.seed_main(store.SCHEMA, populate)
