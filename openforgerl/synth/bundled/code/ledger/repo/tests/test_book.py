import pytest
from ledger.book import Book


def shop():
    book = Book()
    book.open_account("cash", "asset")
    book.open_account("stock", "asset")
    book.open_account("capital", "equity")
    book.open_account("sales", "income")
    book.open_account("rent", "expense")
    book.post("cash", "capital", 100000, "owner invests")
    book.post("stock", "cash", 30000, "buy goods")
    book.post("cash", "sales", 45000, "sell goods")
    book.post("rent", "cash", 12000, "pay rent")
    return book


def test_unknown_kind_rejected():
    with pytest.raises(ValueError):
        Book().open_account("misc", "other")


def test_duplicate_account_rejected():
    book = shop()
    with pytest.raises(ValueError):
        book.open_account("cash", "asset")


def test_post_numbers_entries():
    book = shop()
    assert book.post("cash", "sales", 500).number == 5


def test_post_rejects_same_account():
    with pytest.raises(ValueError):
        shop().post("cash", "cash", 100)


def test_post_rejects_zero_amount():
    with pytest.raises(ValueError):
        shop().post("cash", "sales", 0)


def test_post_rejects_unknown_account():
    with pytest.raises(KeyError):
        shop().post("bank", "sales", 100)


def test_asset_balance():
    assert shop().balance("cash") == 103000


def test_income_balance_is_credit_normal():
    assert shop().balance("sales") == 45000


def test_trial_balance_is_balanced():
    assert shop().trial_balance() == (145000, 145000)


def test_statement_running_balance():
    assert shop().statement("cash") == [(1, 100000, 100000), (2, -30000, 70000), (3, 45000, 115000),
                                        (4, -12000, 103000)]


def test_statement_of_income_account():
    assert shop().statement("sales") == [(3, 45000, 45000)]


def test_net_income():
    assert shop().net_income() == 33000
