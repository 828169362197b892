"""Case conversion: split an identifier or phrase into words, then join them in another style."""

SMALL_WORDS = {"a", "an", "and", "as", "at", "but", "by", "for", "in", "of", "on", "or", "the", "to"}


def split_words(text):
    """Split ``text`` into lowercase words.

    Separators are spaces, underscores, hyphens and dots; a change from lower to upper case starts
    a new word ("parseHTTPResponse" -> ["parse", "http", "response"]), and so does a change between
    letters and digits ("v2beta" -> ["v", "2", "beta"]).
    """
    words = []
    current = ""
    for index, char in enumerate(text):
        if char in " _-.":
            if current:
                words.append(current)
            current = ""
            continue
        if current:
            previous = text[index - 1]
            following = text[index + 1] if index + 1 < len(text) else ""
            starts_upper = char.isupper() and (previous.islower() or (previous.isupper() and following.islower()))
            kind_changes = char.isdigit() != previous.isdigit()
            if starts_upper or kind_changes:
                words.append(current)
                current = ""
        current += char
    if current:
        words.append(current)
    return [word.lower() for word in words]


def snake_case(text):
    """``"Hello World"`` -> ``"hello_world"``."""
    return "_".join(split_words(text))


def kebab_case(text):
    """``"Hello World"`` -> ``"hello-world"``."""
    return "-".join(split_words(text))


def camel_case(text):
    """``"hello world"`` -> ``"helloWorld"``; an empty input gives an empty string."""
    words = split_words(text)
    if not words:
        return ""
    head, rest = words[0], words[1:]
    return head + "".join(word.capitalize() for word in rest)


def pascal_case(text):
    """``"hello world"`` -> ``"HelloWorld"``."""
    return "".join(word.capitalize() for word in split_words(text))


def title_case(text):
    """Capitalise each word except small words (articles, short prepositions) inside the title.

    The first and the last word are always capitalised: ``"the lord of the rings"`` ->
    ``"The Lord of the Rings"``.
    """
    words = text.split()
    titled = []
    for position, word in enumerate(words):
        inner = 0 < position < len(words) - 1
        if inner and word.lower() in SMALL_WORDS:
            titled.append(word.lower())
        else:
            titled.append(word[:1].upper() + word[1:].lower())
    return " ".join(titled)
