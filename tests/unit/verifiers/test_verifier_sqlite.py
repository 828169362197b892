"""SQLite check: query -> expected rows or scalar, read-only, never creating a missing database."""

from __future__ import annotations

import sqlite3

import pytest


@pytest.fixture
def shop(box):
    path = box.path("/app/shop.db")
    with sqlite3.connect(path) as db:
        db.executescript("create table orders(id integer, item text, qty integer);"
                         "insert into orders values (1, 'apple', 3), (2, 'pear', 1);")
    db.close()
    return box


def test_rows_match_in_order_or_as_a_multiset(shop):
    spec = {"type": "sqlite", "database": "/app/shop.db", "query": "select item, qty from orders order by id",
            "expect_rows": [["apple", 3], ["pear", 1]]}
    assert shop.verify(spec).reward == 1.0
    reversed_rows = {**spec, "expect_rows": [["pear", 1], ["apple", 3]]}
    assert shop.verify(reversed_rows).reward == 0.0
    assert shop.verify({**reversed_rows, "ordered": False}).reward == 1.0


def test_scalar_and_its_failure(shop):
    spec = {"type": "sqlite", "database": "/app/shop.db", "query": "select sum(qty) from orders", "expect_scalar": 4}
    assert shop.verify(spec).reward == 1.0
    verdict = shop.verify({**spec, "expect_scalar": 5})
    assert verdict.reward == 0.0 and verdict.metrics["rows"] == [[4]]


def test_null_scalar_is_an_expectation_and_no_rows_is_not_a_scalar(shop):
    spec = {"type": "sqlite", "database": "/app/shop.db", "query": "select max(qty) from orders where id > 9",
            "expect_scalar": None}
    assert shop.verify(spec).reward == 1.0
    verdict = shop.verify({**spec, "query": "select qty from orders where id > 9"})
    assert verdict.reward == 0.0 and "0 row" in verdict.metrics["error"]


def test_an_absent_database_fails_and_is_not_created(box):
    spec = {"type": "sqlite", "database": "/app/shop.db", "query": "select 1", "expect_scalar": 1}
    verdict = box.verify(spec)
    assert verdict.reward == 0.0 and "does not exist" in verdict.metrics["error"]
    assert not box.path("/app/shop.db").exists()


def test_a_file_that_is_not_a_database_fails_with_the_reason(box):
    box.write("/app/shop.db", "id,item\n1,apple\n")
    spec = {"type": "sqlite", "database": "/app/shop.db", "query": "select count(*) from orders", "expect_scalar": 1}
    verdict = box.verify(spec)
    assert verdict.reward == 0.0 and "not a database" in verdict.metrics["error"]


def test_the_query_cannot_write(shop):
    spec = {"type": "sqlite", "database": "/app/shop.db", "query": "delete from orders", "expect_rows": []}
    verdict = shop.verify(spec)
    assert verdict.reward == 0.0 and "readonly" in verdict.metrics["error"]
    with sqlite3.connect(shop.path("/app/shop.db")) as db:
        assert db.execute("select count(*) from orders").fetchone() == (2,)


def test_a_runaway_query_is_interrupted(shop):
    endless = ("with recursive n(i) as (select 1 union all select i + 1 from n) "
               "select count(*) from n")
    verdict = shop.verify({"type": "sqlite", "database": "/app/shop.db", "query": endless, "expect_scalar": 0,
                           "timeout_sec": 0.5})
    assert verdict.reward == 0.0 and "over 0.5 s" in verdict.metrics["error"]
