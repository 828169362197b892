from textkit.case import camel_case, kebab_case, pascal_case, snake_case, split_words, title_case


def test_split_words_on_separators():
    assert split_words("hello_big-wide world.txt") == ["hello", "big", "wide", "world", "txt"]


def test_split_words_on_case_changes():
    assert split_words("parseHTTPResponse") == ["parse", "http", "response"]


def test_split_words_on_digits():
    assert split_words("v2beta") == ["v", "2", "beta"]


def test_split_words_ignores_repeated_separators():
    assert split_words("__init__") == ["init"]


def test_snake_case_from_camel():
    assert snake_case("userAccountId") == "user_account_id"


def test_snake_case_from_phrase():
    assert snake_case("Hello World") == "hello_world"


def test_kebab_case():
    assert kebab_case("MyComponentName") == "my-component-name"


def test_camel_case():
    assert camel_case("user account id") == "userAccountId"


def test_camel_case_of_nothing():
    assert camel_case("  ") == ""


def test_pascal_case():
    assert pascal_case("xml_http_request") == "XmlHttpRequest"


def test_title_case_keeps_small_words_lower():
    assert title_case("the lord of the rings") == "The Lord of the Rings"


def test_title_case_capitalises_last_small_word():
    assert title_case("what are you looking at") == "What Are You Looking At"


def test_title_case_lowers_shouting():
    assert title_case("GONE WITH THE WIND") == "Gone With the Wind"
