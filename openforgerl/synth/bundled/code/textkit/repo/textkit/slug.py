"""Slugs: lowercase ASCII words joined by a separator, safe in file names and URL paths."""

import unicodedata

REPLACEMENTS = {"&": " and ", "@": " at ", "%": " percent ", "+": " plus "}


def strip_accents(text):
    """Remove combining marks: ``"Crème Brûlée"`` -> ``"Creme Brulee"``."""
    decomposed = unicodedata.normalize("NFKD", text)
    kept = []
    for char in decomposed:
        if unicodedata.combining(char):
            continue
        kept.append(char)
    return "".join(kept)


def slugify(text, separator="-", max_length=None):
    """A slug of ``text``.

    Accents are stripped, ``& @ % +`` become words, every other run of characters that are not
    ASCII letters or digits becomes one ``separator``, and the result is lowercase with no leading
    or trailing separator. With ``max_length`` the slug is cut at a separator so that it is at most
    that long (a single word longer than that is cut inside the word).
    """
    for symbol, word in REPLACEMENTS.items():
        text = text.replace(symbol, word)
    text = strip_accents(text).lower()
    parts = []
    current = ""
    for char in text:
        if char.isascii() and char.isalnum():
            current += char
        elif current:
            parts.append(current)
            current = ""
    if current:
        parts.append(current)
    slug = separator.join(parts)
    if max_length is not None and len(slug) > max_length:
        cut = slug[:max_length + 1]
        position = cut.rfind(separator)
        if position > 0:
            slug = cut[:position]
        else:
            slug = slug[:max_length]
    return slug


def unique_slug(text, taken, separator="-"):
    """``slugify(text)``, with ``-2``, ``-3``... appended until it is not in ``taken``."""
    base = slugify(text, separator)
    candidate = base
    number = 2
    while candidate in taken:
        candidate = f"{base}{separator}{number}"
        number += 1
    return candidate
