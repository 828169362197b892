"""Word statistics: counts, most common words, palindromes and edit distance."""

import re

WORD = re.compile(r"[A-Za-z0-9']+")


def words_of(text):
    """The words of ``text``, lowercase, apostrophes kept inside words (``"don't"``)."""
    return [word.strip("'").lower() for word in WORD.findall(text) if word.strip("'")]


def word_count(text):
    """How many words ``text`` has."""
    return len(words_of(text))


def top_words(text, count, stopwords=()):
    """The ``count`` most frequent words as (word, occurrences), most frequent first.

    Ties are broken alphabetically; words in ``stopwords`` are ignored.
    """
    frequency = {}
    for word in words_of(text):
        if word in stopwords:
            continue
        frequency[word] = frequency.get(word, 0) + 1
    ranked = sorted(frequency.items(), key=lambda item: (-item[1], item[0]))
    return ranked[:count]


def is_palindrome(text):
    """True when the letters and digits of ``text`` read the same both ways (case ignored)."""
    letters = [char.lower() for char in text if char.isalnum()]
    left = 0
    right = len(letters) - 1
    while left < right:
        if letters[left] != letters[right]:
            return False
        left += 1
        right -= 1
    return True


def edit_distance(first, second):
    """Levenshtein distance: the fewest single-character inserts, deletes and substitutions."""
    if len(first) < len(second):
        first, second = second, first
    previous = list(range(len(second) + 1))
    for row, char_a in enumerate(first, start=1):
        current = [row]
        for column, char_b in enumerate(second, start=1):
            cost = 0 if char_a == char_b else 1
            current.append(min(previous[column] + 1, current[column - 1] + 1, previous[column - 1] + cost))
        previous = current
    return previous[-1]


def closest(word, choices):
    """The choice with the smallest edit distance to ``word`` (the first one on a tie), or None."""
    best = None
    best_distance = None
    for choice in choices:
        distance = edit_distance(word, choice)
        if best_distance is None or distance < best_distance:
            best, best_distance = choice, distance
    return best
