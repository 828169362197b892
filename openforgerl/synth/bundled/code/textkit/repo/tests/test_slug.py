from textkit.slug import slugify, strip_accents, unique_slug


def test_strip_accents():
    assert strip_accents("Crème Brûlée à la carte") == "Creme Brulee a la carte"


def test_strip_accents_keeps_plain_text():
    assert strip_accents("plain text") == "plain text"


def test_slugify_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_slugify_accents_and_symbols():
    assert slugify("Crème & Café @ 100%") == "creme-and-cafe-at-100-percent"


def test_slugify_custom_separator():
    assert slugify("Quarterly Report 2024", separator="_") == "quarterly_report_2024"


def test_slugify_trims_separators():
    assert slugify("  --Already--Slugged--  ") == "already-slugged"


def test_slugify_max_length_cuts_at_separator():
    assert slugify("the quick brown fox jumps", max_length=15) == "the-quick-brown"


def test_slugify_max_length_exact_fit():
    assert slugify("alpha beta gamma", max_length=10) == "alpha-beta"


def test_slugify_max_length_long_word():
    assert slugify("supercalifragilistic", max_length=5) == "super"


def test_unique_slug_free():
    assert unique_slug("New Post", {"old-post"}) == "new-post"


def test_unique_slug_numbers_duplicates():
    assert unique_slug("New Post", {"new-post", "new-post-2"}) == "new-post-3"
