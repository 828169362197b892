"""The address book's data: contacts and every change the app makes (stdlib sqlite3 only).

The HTTP handlers (app.py), the seed (seed.py) and the task families' host effects all change the
database through these functions, so a task's reference effect is exactly what the app would do.
"""

SCHEMA = """
CREATE TABLE contacts (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  email TEXT NOT NULL DEFAULT '',
  phone TEXT NOT NULL DEFAULT '',
  company TEXT NOT NULL DEFAULT '',
  city TEXT NOT NULL DEFAULT ''
);
"""
FIELDS = ("name", "email", "phone", "company", "city")
LABELS = {"name": "Name", "email": "Email", "phone": "Phone", "company": "Company", "city": "City"}


def _clean(field, value):
    value = " ".join(str(value or "").split())
    if field == "name" and not value:
        raise ValueError("a contact needs a name")
    if field == "email" and value and ("@" not in value or " " in value):
        raise ValueError(f"{value!r} is not an email address")
    if len(value) > 100:
        raise ValueError(f"the {field} is longer than 100 characters")
    return value


def contacts(db, search=None):
    """Contacts by name; ``search`` matches any field, ignoring case."""
    sql = "SELECT id, " + ", ".join(FIELDS) + " FROM contacts ORDER BY name, id"
    found = [dict(row) for row in db.execute(sql)]
    if search:
        needle = search.strip().lower()
        found = [c for c in found if any(needle in str(c[f]).lower() for f in FIELDS)]
    return found


def contact(db, contact_id):
    found = [c for c in contacts(db) if c["id"] == contact_id]
    if not found:
        raise LookupError(f"there is no contact {contact_id}")
    return found[0]


def id_of(db, name):
    row = db.execute("SELECT id FROM contacts WHERE name = ? ORDER BY id", (name,)).fetchone()
    if row is None:
        raise LookupError(f"there is no contact named {name!r}")
    return row[0]


def add_contact(db, **fields):
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
    values = {f: _clean(f, fields.get(f, "")) for f in FIELDS}
    return db.execute("INSERT INTO contacts (name, email, phone, company, city) "
                      "VALUES (:name, :email, :phone, :company, :city)", values).lastrowid


def update_contact(db, contact_id, **fields):
    """Change the given fields only."""
    contact(db, contact_id)
    for field, value in fields.items():
        if field not in FIELDS:
            raise ValueError(f"unknown field {field!r}")
        db.execute(f"UPDATE contacts SET {field} = ? WHERE id = ?", (_clean(field, value), contact_id))


def delete_contact(db, contact_id):
    contact(db, contact_id)
    db.execute("DELETE FROM contacts WHERE id = ?", (contact_id,))
