"""The to-do app's data: schema and every change the app makes (stdlib sqlite3 only).

The HTTP handlers (app.py), the seed (seed.py) and the task families' host effects all change the
database through these functions, so a task's reference effect is exactly what the app would do.
"""

import datetime

SCHEMA = """
CREATE TABLE lists (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE todos (
  id INTEGER PRIMARY KEY,
  list_id INTEGER NOT NULL REFERENCES lists(id),
  title TEXT NOT NULL,
  due TEXT NOT NULL DEFAULT '',
  done INTEGER NOT NULL DEFAULT 0 CHECK (done IN (0, 1))
);
"""
MAX_TITLE = 120


def lists(db):
    return [row[0] for row in db.execute("SELECT name FROM lists ORDER BY id")]


def todos(db, list_name=None, status=None):
    """Items as dicts, in the order they were added; ``status``: open, done or None for all."""
    sql = ("SELECT t.id, t.title, l.name AS list, t.due, t.done FROM todos t JOIN lists l ON l.id = t.list_id "
           "WHERE (? IS NULL OR l.name = ?) AND (? IS NULL OR t.done = ?) ORDER BY t.id")
    done = None if status is None else int(status == "done")
    return [dict(row) | {"done": bool(row["done"])} for row in db.execute(sql, (list_name, list_name, done, done))]


def todo(db, todo_id):
    found = [t for t in todos(db) if t["id"] == todo_id]
    if not found:
        raise LookupError(f"there is no to-do item {todo_id}")
    return found[0]


def _list_id(db, name):
    row = db.execute("SELECT id FROM lists WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise ValueError(f"there is no list {name!r} (lists: {', '.join(lists(db))})")
    return row[0]


def _title(title):
    title = " ".join(str(title).split())
    if not title or len(title) > MAX_TITLE:
        raise ValueError(f"the title must be 1 to {MAX_TITLE} characters")
    return title


def _due(due):
    due = str(due or "").strip()
    if due:
        try:
            datetime.date.fromisoformat(due)
        except ValueError:
            raise ValueError(f"the due date {due!r} is not a date like 2027-03-14") from None
    return due


def add_todo(db, title, list_name, due=""):
    cursor = db.execute("INSERT INTO todos (list_id, title, due) VALUES (?, ?, ?)",
                        (_list_id(db, list_name), _title(title), _due(due)))
    return cursor.lastrowid


def update_todo(db, todo_id, title=None, list_name=None, due=None, done=None):
    todo(db, todo_id)
    if title is not None:
        db.execute("UPDATE todos SET title = ? WHERE id = ?", (_title(title), todo_id))
    if list_name is not None:
        db.execute("UPDATE todos SET list_id = ? WHERE id = ?", (_list_id(db, list_name), todo_id))
    if due is not None:
        db.execute("UPDATE todos SET due = ? WHERE id = ?", (_due(due), todo_id))
    if done is not None:
        db.execute("UPDATE todos SET done = ? WHERE id = ?", (int(bool(done)), todo_id))


def delete_todo(db, todo_id):
    todo(db, todo_id)
    db.execute("DELETE FROM todos WHERE id = ?", (todo_id,))


def id_of(db, title):
    """The id of the item titled ``title`` (titles in the seed are unique)."""
    row = db.execute("SELECT id FROM todos WHERE title = ? ORDER BY id", (title,)).fetchone()
    if row is None:
        raise LookupError(f"there is no to-do item titled {title!r}")
    return row[0]
