"""Line wrapping, truncation and centring for plain text."""


def wrap(text, width):
    """Greedy word wrap: lines of at most ``width`` characters, words separated by one space.

    A word longer than ``width`` is put on a line of its own (it is not broken). Blank input gives
    no lines.
    """
    if width < 1:
        raise ValueError("width must be at least 1")
    lines = []
    line = ""
    for word in text.split():
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= width:
            line = line + " " + word
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines


def fill(text, width):
    """``wrap`` joined with newlines."""
    return "\n".join(wrap(text, width))


def truncate(text, width, ellipsis="..."):
    """``text`` cut to at most ``width`` characters, ending in ``ellipsis`` when it was cut.

    The cut happens at a word boundary when there is one in the kept part.
    """
    if len(text) <= width:
        return text
    if width <= len(ellipsis):
        return ellipsis[:width]
    room = width - len(ellipsis)
    kept = text[:room]
    boundary = kept.rfind(" ")
    if boundary > 0:
        kept = kept[:boundary]
    return kept.rstrip() + ellipsis


def center(text, width, fill_char=" "):
    """``text`` centred in ``width`` columns; an odd leftover column goes to the right side."""
    if len(fill_char) != 1:
        raise ValueError("fill_char must be one character")
    missing = width - len(text)
    if missing <= 0:
        return text
    left = missing // 2
    right = missing - left
    return fill_char * left + text + fill_char * right


def indent(text, prefix, skip_blank=True):
    """Prefix every line of ``text``; blank lines stay blank unless ``skip_blank`` is false."""
    out = []
    for line in text.split("\n"):
        if skip_blank and not line.strip():
            out.append(line)
        else:
            out.append(prefix + line)
    return "\n".join(out)
