"""The address book: search, view, add, edit and delete contacts, server-rendered, plus a JSON API.

    python3 app.py --port 0 --db /var/lib/webapp/app.db

Pages: / (list and search), /contacts/new, /contacts/<id>, /contacts/<id>/edit, /answer.
API: GET/POST /api/contacts (?q=), POST/DELETE /api/contacts/<id>, POST /api/answer.
Every change goes through store.py.
"""

import store
import webkit
from webkit import api, button, esc, field, form, link, redirect

app = webkit.App("Contacts", [("/", "All contacts"), ("/contacts/new", "Add contact")])


@app.route("GET", "/")
def index(request):
    search = request.query.get("q", "").strip()
    found = store.contacts(request.db, search or None)
    search_form = ('<form method="get" action="/" role="search"><p><label for="q">Search</label> '
                   f'<input id="q" name="q" type="search" value="{esc(search)}"></p>'
                   '<button type="submit">Search</button></form>')
    rows = [[link(f"/contacts/{c['id']}", c["name"]), esc(c["company"]), esc(c["email"]), esc(c["phone"])]
            for c in found]
    caption = f"Contacts matching {search!r} ({len(rows)})" if search else f"All contacts ({len(rows)})"
    return app.page("Contacts", search_form + webkit.table(["Name", "Company", "Email", "Phone"], rows, caption))


def _fields(values):
    return "".join(field(store.LABELS[f], f, values.get(f, ""), "email" if f == "email" else "text")
                   for f in store.FIELDS)


@app.route("GET", "/contacts/new")
def new_page(request):
    return app.page("Add contact", form("/contacts", _fields({}), "Save contact", "New contact"))


@app.route("POST", "/contacts")
def add(request):
    contact_id = store.add_contact(request.db, **{f: request.text(f, "") for f in store.FIELDS})
    return redirect(f"/contacts/{contact_id}")


@app.route("GET", r"/contacts/(\d+)")
def contact_page(request):
    contact = store.contact(request.db, int(request.groups[0]))
    details = "".join(f"<dt>{store.LABELS[f]}</dt><dd>{esc(contact[f]) or '-'}</dd>" for f in store.FIELDS[1:])
    actions = (f'<p><a href="/contacts/{contact["id"]}/edit" aria-label="Edit: {esc(contact["name"])}">Edit</a> '
               + button(f"/contacts/{contact['id']}/delete", "Delete", f"Delete: {contact['name']}") + "</p>")
    return app.page(contact["name"], f"<dl>{details}</dl>{actions}")


@app.route("GET", r"/contacts/(\d+)/edit")
def edit_page(request):
    contact = store.contact(request.db, int(request.groups[0]))
    return app.page(f"Edit: {contact['name']}", form(f"/contacts/{contact['id']}", _fields(contact), "Save contact",
                                                     "Edit contact"))


@app.route("POST", r"/contacts/(\d+)")
def edit(request):
    store.update_contact(request.db, int(request.groups[0]), **{f: request.text(f, "") for f in store.FIELDS})
    return redirect(f"/contacts/{request.groups[0]}")


@app.route("POST", r"/contacts/(\d+)/delete")
def delete(request):
    store.delete_contact(request.db, int(request.groups[0]))
    return redirect("/")


@app.route("GET", "/api/contacts")
def api_contacts(request):
    return api(store.contacts(request.db, request.query.get("q") or None))


@app.route("POST", "/api/contacts")
def api_add(request):
    contact_id = store.add_contact(request.db, **request.data)
    return api(store.contact(request.db, contact_id), 201)


@app.route("POST", r"/api/contacts/(\d+)")
def api_update(request):
    store.update_contact(request.db, int(request.groups[0]), **request.data)
    return api(store.contact(request.db, int(request.groups[0])))


@app.route("DELETE", r"/api/contacts/(\d+)")
def api_delete(request):
    store.delete_contact(request.db, int(request.groups[0]))
    return api({"deleted": int(request.groups[0])})


if __name__ == "__main__":
    webkit.serve(app)
