"""The to-do app: lists of items with due dates, server-rendered, plus a JSON API (stdlib only).

    python3 app.py --port 0 --db /var/lib/webapp/app.db

Pages: / (items, filters, the add form), /todos/<id>/edit, /answer. API: GET/POST /api/todos,
POST/DELETE /api/todos/<id>, GET /api/lists, POST /api/answer. Every change goes through store.py.
"""

import urllib.parse

import store
import webkit
from webkit import api, button, esc, field, form, link, redirect, select

app = webkit.App("To-do", [("/", "All items"), ("/?status=open", "Open"), ("/?status=done", "Done")])
STATUSES = {"open": "Open items", "done": "Done items"}


def _item_row(item):
    toggle = ("Reopen", f"Reopen: {item['title']}") if item["done"] else ("Mark done", f"Mark done: {item['title']}")
    actions = " ".join([button(f"/todos/{item['id']}/toggle", *toggle),
                        f'<a href="/todos/{item["id"]}/edit" aria-label="Edit: {esc(item["title"])}">Edit</a>',
                        button(f"/todos/{item['id']}/delete", "Delete", f"Delete: {item['title']}")])
    return [esc(item["title"]), esc(item["list"]), esc(item["due"] or "-"), "Done" if item["done"] else "Open", actions]


def _add_form(db):
    inner = (field("Title", "title") + select("List", "list", [(n, n) for n in store.lists(db)])
             + field("Due date", "due", placeholder="YYYY-MM-DD"))
    return form("/todos", inner, "Add item", "Add an item")


@app.route("GET", "/")
def index(request):
    status = request.query.get("status") if request.query.get("status") in STATUSES else None
    list_name = request.query.get("list") or None
    items = store.todos(request.db, list_name, status)
    lists = " ".join(link(f"/?list={urllib.parse.quote(name)}", name) for name in store.lists(request.db))
    heading = STATUSES.get(status, "All items") + (f" in {list_name}" if list_name else "")
    body = (f"<p>Lists: {lists}</p><h2>Add an item</h2>{_add_form(request.db)}"
            + webkit.table(["Title", "List", "Due", "Status", "Actions"], [_item_row(i) for i in items],
                           f"{heading} ({len(items)})"))
    return app.page("To-do", body)


@app.route("POST", "/todos")
def add(request):
    store.add_todo(request.db, request.text("title"), request.text("list"), request.text("due", ""))
    return redirect("/")


@app.route("GET", r"/todos/(\d+)/edit")
def edit_page(request):
    item = store.todo(request.db, int(request.groups[0]))
    inner = (field("Title", "title", item["title"])
             + select("List", "list", [(n, n) for n in store.lists(request.db)], item["list"])
             + field("Due date", "due", item["due"], placeholder="YYYY-MM-DD"))
    return app.page(f"Edit: {item['title']}", form(f"/todos/{item['id']}", inner, "Save", "Edit the item"))


@app.route("POST", r"/todos/(\d+)")
def edit(request):
    store.update_todo(request.db, int(request.groups[0]), title=request.text("title"),
                      list_name=request.text("list"), due=request.text("due", ""))
    return redirect("/")


@app.route("POST", r"/todos/(\d+)/toggle")
def toggle(request):
    item = store.todo(request.db, int(request.groups[0]))
    store.update_todo(request.db, item["id"], done=not item["done"])
    return redirect("/")


@app.route("POST", r"/todos/(\d+)/delete")
def delete(request):
    store.delete_todo(request.db, int(request.groups[0]))
    return redirect("/")


@app.route("GET", "/api/lists")
def api_lists(request):
    return api(store.lists(request.db))


@app.route("GET", "/api/todos")
def api_todos(request):
    return api(store.todos(request.db, request.query.get("list") or None, request.query.get("status") or None))


@app.route("POST", "/api/todos")
def api_add(request):
    todo_id = store.add_todo(request.db, request.text("title"), request.text("list"), request.text("due", ""))
    return api(store.todo(request.db, todo_id), 201)


@app.route("POST", r"/api/todos/(\d+)")
def api_update(request):
    todo_id, data = int(request.groups[0]), request.data
    store.update_todo(request.db, todo_id, title=data.get("title"), list_name=data.get("list"), due=data.get("due"),
                      done=data.get("done"))
    return api(store.todo(request.db, todo_id))


@app.route("DELETE", r"/api/todos/(\d+)")
def api_delete(request):
    store.delete_todo(request.db, int(request.groups[0]))
    return api({"deleted": int(request.groups[0])})


if __name__ == "__main__":
    webkit.serve(app)
