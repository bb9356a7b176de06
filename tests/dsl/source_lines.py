"""Find the line of a test file that holds a given text (for asserting errors' source lines)."""


def line_of(path: str, text: str) -> int:
    """The 1-based number of the first line of ``path`` containing ``text`` (not a line_of call)."""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if text in line and "line_of(" not in line:
                return number
    raise AssertionError(f"{text!r} is not in {path}")
