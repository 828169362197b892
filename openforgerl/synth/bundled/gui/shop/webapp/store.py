"""The shop's data: products, a cart, orders, and every change the app makes (stdlib sqlite3 only).

The HTTP handlers (app.py), the seed (seed.py) and the task families' host effects all change the
database through these functions, so a task's reference effect is exactly what the app would do.
"""

SCHEMA = """
CREATE TABLE products (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  category TEXT NOT NULL,
  price_cents INTEGER NOT NULL CHECK (price_cents > 0),
  description TEXT NOT NULL DEFAULT ''
);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  street TEXT NOT NULL,
  city TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'placed' CHECK (status IN ('placed', 'shipped', 'cancelled'))
);
CREATE TABLE order_items (
  order_id INTEGER NOT NULL REFERENCES orders(id),
  product_id INTEGER NOT NULL REFERENCES products(id),
  quantity INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 99),
  PRIMARY KEY (order_id, product_id)
);
CREATE TABLE cart (
  product_id INTEGER PRIMARY KEY REFERENCES products(id),
  quantity INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 99)
);
"""
PRODUCT = "SELECT id, name, category, price_cents, description FROM products"


def price(cents):
    return f"${cents // 100}.{cents % 100:02d}"


def _product(row):
    return dict(row) | {"price": price(row["price_cents"])}


def categories(db):
    return [row[0] for row in db.execute("SELECT DISTINCT category FROM products ORDER BY category")]


def products(db, category=None):
    sql = PRODUCT + " WHERE (? IS NULL OR category = ?) ORDER BY category, name"
    return [_product(row) for row in db.execute(sql, (category, category))]


def product(db, product_id):
    row = db.execute(PRODUCT + " WHERE id = ?", (product_id,)).fetchone()
    if row is None:
        raise LookupError(f"there is no product {product_id}")
    return _product(row)


def product_id(db, name):
    row = db.execute("SELECT id FROM products WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise LookupError(f"there is no product named {name!r}")
    return row[0]


def _quantity(quantity):
    try:
        quantity = int(quantity)
    except (TypeError, ValueError):
        raise ValueError("the quantity must be a whole number") from None
    if not 1 <= quantity <= 99:
        raise ValueError("the quantity must be between 1 and 99")
    return quantity


def add_to_cart(db, pid, quantity):
    product(db, pid)
    quantity = _quantity(quantity)
    row = db.execute("SELECT quantity FROM cart WHERE product_id = ?", (pid,)).fetchone()
    total = _quantity(quantity + (row[0] if row else 0))
    db.execute("INSERT OR REPLACE INTO cart (product_id, quantity) VALUES (?, ?)", (pid, total))


def remove_from_cart(db, pid):
    db.execute("DELETE FROM cart WHERE product_id = ?", (pid,))


def cart(db):
    sql = ("SELECT p.id, p.name, p.price_cents, c.quantity FROM cart c JOIN products p ON p.id = c.product_id "
           "ORDER BY p.name")
    return [dict(row) | {"line": price(row["price_cents"] * row["quantity"])} for row in db.execute(sql)]


def place_order(db, name, street, city, items):
    """A new order for ``items`` ((product id, quantity) pairs; repeats are added up); returns its id."""
    address = {"name": str(name).strip(), "street": str(street).strip(), "city": str(city).strip()}
    empty = [key for key, value in address.items() if not value]
    if empty:
        raise ValueError(f"the order needs a {', '.join(empty)}")
    totals = {}
    for pid, quantity in items:
        product(db, pid)
        totals[pid] = _quantity(totals.get(pid, 0) + _quantity(quantity))
    if not totals:
        raise ValueError("the order has no products")
    order_id = db.execute("INSERT INTO orders (name, street, city) VALUES (:name, :street, :city)", address).lastrowid
    db.executemany("INSERT INTO order_items (order_id, product_id, quantity) VALUES (?, ?, ?)",
                   [(order_id, pid, quantity) for pid, quantity in sorted(totals.items())])
    return order_id


def checkout(db, name, street, city):
    """Order what is in the cart, then empty it."""
    order_id = place_order(db, name, street, city, [(line["id"], line["quantity"]) for line in cart(db)])
    db.execute("DELETE FROM cart")
    return order_id


def orders(db):
    listed = [dict(row) | {"items": []} for row in db.execute("SELECT * FROM orders ORDER BY id")]
    by_id = {order["id"]: order for order in listed}
    sql = ("SELECT i.order_id, p.name, i.quantity FROM order_items i JOIN products p ON p.id = i.product_id "
           "ORDER BY i.order_id, p.name")
    for order_id, name, quantity in db.execute(sql):
        by_id[order_id]["items"].append({"product": name, "quantity": quantity})
    return listed


def set_status(db, order_id, status):
    db.execute("UPDATE orders SET status = ? WHERE id = ?", (status, order_id))


def cancel_order(db, order_id):
    row = db.execute("SELECT status FROM orders WHERE id = ?", (order_id,)).fetchone()
    if row is None:
        raise LookupError(f"there is no order {order_id}")
    if row[0] != "placed":
        raise ValueError(f"order {order_id} is {row[0]}; only placed orders can be cancelled")
    set_status(db, order_id, "cancelled")
