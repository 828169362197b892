"""The shop: a catalogue by category, a cart, checkout and past orders, server-rendered, plus a JSON API.

    python3 app.py --port 0 --db /var/lib/webapp/app.db

Pages: / (catalogue), /products/<id>, /cart (and checkout), /orders, /answer. API: GET /api/products
(?category=), GET /api/categories, GET/POST /api/orders, POST /api/orders/<id>/cancel,
POST /api/answer. Every change goes through store.py.
"""

import urllib.parse

import store
import webkit
from webkit import api, button, esc, field, form, link, redirect

app = webkit.App("Shop", [("/", "Catalogue"), ("/cart", "Cart"), ("/orders", "Orders")])


@app.route("GET", "/")
def catalogue(request):
    category = request.query.get("category") or None
    links = " ".join(link(f"/?category={urllib.parse.quote(c)}", c) for c in store.categories(request.db))
    rows = [[link(f"/products/{p['id']}", p["name"]), esc(p["category"]), p["price"]]
            for p in store.products(request.db, category)]
    body = (f"<p>Categories: {links} {link('/', 'All')}</p>"
            + webkit.table(["Product", "Category", "Price"], rows, f"{category or 'All products'} ({len(rows)})"))
    return app.page("Shop", body)


@app.route("GET", r"/products/(\d+)")
def product_page(request):
    item = store.product(request.db, int(request.groups[0]))
    body = (f"<p>Category: {esc(item['category'])}</p><p>Price: {item['price']}</p><p>{esc(item['description'])}</p>"
            + form(f"/products/{item['id']}/cart", field("Quantity", "quantity", "1", "number"), "Add to cart",
                   f"Add {item['name']} to the cart"))
    return app.page(item["name"], body)


@app.route("POST", r"/products/(\d+)/cart")
def add_to_cart(request):
    store.add_to_cart(request.db, int(request.groups[0]), request.text("quantity"))
    return redirect("/cart")


@app.route("GET", "/cart")
def cart_page(request):
    lines = store.cart(request.db)
    rows = [[esc(line["name"]), str(line["quantity"]), line["line"],
             button(f"/cart/{line['id']}/remove", "Remove", f"Remove: {line['name']}")] for line in lines]
    total = sum(line["price_cents"] * line["quantity"] for line in lines)
    checkout = form("/cart/checkout", field("Full name", "name") + field("Street", "street") + field("City", "city"),
                    "Place order", "Checkout")
    body = (webkit.table(["Product", "Quantity", "Price", "Actions"], rows, f"Cart ({len(rows)})")
            + f"<p>Total: {store.price(total)}</p>"
            + (f"<h2>Checkout</h2>{checkout}" if lines else "<p>Your cart is empty.</p>"))
    return app.page("Cart", body)


@app.route("POST", r"/cart/(\d+)/remove")
def remove_from_cart(request):
    store.remove_from_cart(request.db, int(request.groups[0]))
    return redirect("/cart")


@app.route("POST", "/cart/checkout")
def checkout(request):
    order_id = store.checkout(request.db, request.text("name"), request.text("street"), request.text("city"))
    return redirect(f"/orders#order-{order_id}")


def _order_row(order):
    items = ", ".join(f"{i['quantity']} x {esc(i['product'])}" for i in order["items"])
    cancel = (button(f"/orders/{order['id']}/cancel", "Cancel", f"Cancel order #{order['id']}")
              if order["status"] == "placed" else "")
    return [f'<span id="order-{order["id"]}">#{order["id"]}</span>', esc(order["name"]),
            esc(f"{order['street']}, {order['city']}"), items, order["status"], cancel]


@app.route("GET", "/orders")
def orders_page(request):
    orders = store.orders(request.db)
    body = webkit.table(["Order", "Name", "Address", "Items", "Status", "Actions"], [_order_row(o) for o in orders],
                        f"Orders ({len(orders)})")
    return app.page("Orders", body)


@app.route("POST", r"/orders/(\d+)/cancel")
def cancel(request):
    store.cancel_order(request.db, int(request.groups[0]))
    return redirect("/orders")


@app.route("GET", "/api/categories")
def api_categories(request):
    return api(store.categories(request.db))


@app.route("GET", "/api/products")
def api_products(request):
    return api(store.products(request.db, request.query.get("category") or None))


@app.route("GET", "/api/orders")
def api_orders(request):
    return api(store.orders(request.db))


@app.route("POST", "/api/orders")
def api_order(request):
    """{"name", "street", "city", "items": [{"product": name or "product_id": id, "quantity": n}]}"""
    items = request.data.get("items")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise webkit.Invalid('items must be a list like [{"product": "Name", "quantity": 1}]')
    pairs = [(int(i["product_id"]) if "product_id" in i else store.product_id(request.db, str(i.get("product"))),
              i.get("quantity", 1)) for i in items]
    order_id = store.place_order(request.db, request.text("name"), request.text("street"), request.text("city"), pairs)
    return api(next(o for o in store.orders(request.db) if o["id"] == order_id), 201)


@app.route("POST", r"/api/orders/(\d+)/cancel")
def api_cancel(request):
    store.cancel_order(request.db, int(request.groups[0]))
    return api(next(o for o in store.orders(request.db) if o["id"] == int(request.groups[0])))


if __name__ == "__main__":
    webkit.serve(app)
