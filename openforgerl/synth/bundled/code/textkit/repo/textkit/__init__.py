"""textkit: small text utilities (case conversion, slugs, wrapping, word statistics)."""

from textkit.case import camel_case, kebab_case, pascal_case, snake_case, split_words, title_case
from textkit.slug import slugify, strip_accents
from textkit.stats import edit_distance, is_palindrome, top_words, word_count
from textkit.wrap import center, truncate, wrap

__all__ = ["camel_case", "center", "edit_distance", "is_palindrome", "kebab_case", "pascal_case", "slugify",
           "snake_case", "split_words", "strip_accents", "title_case", "top_words", "truncate", "word_count", "wrap"]
