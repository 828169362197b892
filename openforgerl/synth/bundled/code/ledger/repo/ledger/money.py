"""Money as integer cents: parsing, formatting, splitting and percentages (no floats kept)."""


def parse_amount(text):
    """Cents from a decimal string: ``"1,234.5"`` -> 123450, ``"-0.07"`` -> -7, ``"12"`` -> 1200.

    Thousands separators (commas) are allowed; more than two decimals is an error.
    """
    text = text.strip().replace(",", "")
    negative = text.startswith("-")
    if negative or text.startswith("+"):
        text = text[1:]
    whole, dot, fraction = text.partition(".")
    if not whole:
        whole = "0"
    if not whole.isdigit() or (fraction and not fraction.isdigit()):
        raise ValueError(f"not an amount: {text!r}")
    if len(fraction) > 2:
        raise ValueError(f"more than two decimals: {text!r}")
    cents = int(whole) * 100 + int(fraction.ljust(2, "0"))
    return -cents if negative else cents


def format_amount(cents, symbol="$"):
    """``123450`` -> ``"$1,234.50"``; negative amounts get a leading minus: ``"-$0.07"``."""
    sign = "-" if cents < 0 else ""
    whole, fraction = divmod(abs(cents), 100)
    digits = str(whole)
    groups = []
    while len(digits) > 3:
        groups.insert(0, digits[-3:])
        digits = digits[:-3]
    groups.insert(0, digits)
    return f"{sign}{symbol}{','.join(groups)}.{fraction:02d}"


def split_evenly(cents, parts):
    """``cents`` split into ``parts`` shares that differ by at most one cent and sum to ``cents``.

    The first shares get the extra cents: ``split_evenly(1000, 3)`` -> ``[334, 333, 333]``.
    """
    if parts < 1:
        raise ValueError("parts must be at least 1")
    share, extra = divmod(cents, parts)
    shares = []
    for index in range(parts):
        if index < extra:
            shares.append(share + 1)
        else:
            shares.append(share)
    return shares


def percent_of(cents, percent):
    """``percent`` % of ``cents``, rounded half away from zero to a whole cent."""
    scaled = cents * percent
    rounded, remainder = divmod(abs(scaled), 100)
    if remainder * 2 >= 100:
        rounded += 1
    return -rounded if scaled < 0 else rounded
