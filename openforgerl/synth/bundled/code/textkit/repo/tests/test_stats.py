from textkit.stats import closest, edit_distance, is_palindrome, top_words, word_count, words_of


def test_words_of_keeps_inner_apostrophes():
    assert words_of("Don't stop 'now'") == ["don't", "stop", "now"]


def test_word_count():
    assert word_count("One, two; three... four!") == 4


def test_top_words_orders_by_frequency_then_alphabet():
    text = "b a c b a b d"
    assert top_words(text, 3) == [("b", 3), ("a", 2), ("c", 1)]


def test_top_words_ignores_stopwords():
    assert top_words("the cat and the hat", 2, stopwords={"the", "and"}) == [("cat", 1), ("hat", 1)]


def test_is_palindrome_phrase():
    assert is_palindrome("A man, a plan, a canal: Panama")


def test_is_palindrome_rejects():
    assert not is_palindrome("palindrome")


def test_is_palindrome_even_length():
    assert not is_palindrome("abca")


def test_edit_distance_classic():
    assert edit_distance("kitten", "sitting") == 3


def test_edit_distance_empty():
    assert edit_distance("", "abc") == 3


def test_edit_distance_same():
    assert edit_distance("flaw", "flaw") == 0


def test_closest_choice():
    assert closest("appel", ["apple", "ample", "maple"]) == "apple"


def test_closest_of_nothing():
    assert closest("word", []) is None
