"""What `Kernel.raw` accepts: PTX statements that stay inside the kernel body they are put in.

The rule (raw text is otherwise unchecked):

- ``text`` is a ``str`` of PTX statements of the kernel body, each ended by ``;``, optionally
  grouped in ``{ ... }`` scoped blocks; newlines are allowed (a multi-line scoped block), as are
  ``//`` and ``/* */`` comments, which the checks below ignore. No NUL or carriage return.
- Braces balance: the text never closes a block it did not open (a ``}`` would end the kernel's
  body) and closes every block it opens (an open ``{`` would swallow the rest of the kernel).
- No directive that belongs to the module or the entry, anywhere in the text: ``.entry``,
  ``.func``, ``.visible``, ``.extern``, ``.weak``, ``.version``, ``.target``, ``.address_size``,
  ``.file``, ``.loc``, ``.section``, ``.alias``, ``.callprototype``, ``.calltargets``,
  ``.branchtargets`` and the performance directives (``.maxntid``, ``.reqntid``, ``.maxnreg``,
  ``.minnctapersm``, ``.reqnctapercluster``, ``.explicitcluster``, ``.maxclusterrank``,
  ``.noreturn``). So a newline cannot start a second entry.
- A statement that begins with a directive is a ``.reg`` declaration (inside a scoped block) or a
  ``.pragma``; other declarations (``.shared``, ``.global``, ``.local``, ``.param``, ``.const``)
  change the kernel's resources behind the builder and are refused. Instructions whose names
  contain such words (``ld.global.u32``) are instructions, not directives, and are fine.
"""
from __future__ import annotations

import re

from .errors import PTXBuildError

OUTSIDE_BODY = frozenset({
    "entry", "func", "visible", "extern", "weak", "version", "target", "address_size", "file",
    "loc", "section", "alias", "callprototype", "calltargets", "branchtargets", "maxntid",
    "reqntid", "maxnreg", "minnctapersm", "reqnctapercluster", "explicitcluster",
    "maxclusterrank", "noreturn",
})
STATEMENT_DIRECTIVES = frozenset({"reg", "pragma"})

_TOKEN = re.compile(r"(?<![\w$%.])\.([A-Za-z_][\w$]*)")
_LEAD = re.compile(r"^(?:[A-Za-z_$][\w$]*\s*:\s*)*(?:@!?%?[\w$]+\s+)?")
_REGISTER = re.compile(r"%[A-Za-z_$][\w$]*")


def _blank_comments(text: str) -> str:
    """text with every comment character replaced by a space (newlines kept), so positions in
    the result are positions in text."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise PTXBuildError("a /* comment is never closed", instruction="raw", value=text)
            out.append("".join(c if c == "\n" else " " for c in text[i:j + 2]))
            i = j + 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def check_raw(text) -> str:
    """The code of ``text`` (comments blanked), or PTXBuildError naming the rule it breaks."""
    if not isinstance(text, str):
        raise PTXBuildError("raw text is a str of PTX statements", instruction="raw", value=text)
    if "\x00" in text or "\r" in text:
        raise PTXBuildError("raw text has no NUL or carriage-return characters",
                            instruction="raw", value=text)
    code = _blank_comments(text)
    depth = 0
    for c in code:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                raise PTXBuildError("closes a block it did not open (a '}' here would end the "
                                    "kernel's body)", instruction="raw", value=text)
    if depth:
        raise PTXBuildError(f"opens {depth} block(s) it does not close ('{{' without '}}')",
                            instruction="raw", value=text)
    for m in _TOKEN.finditer(code):
        if m.group(1) in OUTSIDE_BODY:
            raise PTXBuildError(f"contains the directive .{m.group(1)}, which belongs to the "
                                "module or the entry, not to a kernel body", instruction="raw",
                                value=text)
    for statement in re.split(r"[;{}]", code):
        body = _LEAD.sub("", statement.strip())
        if body.startswith("."):
            name = _TOKEN.match(body)
            word = name.group(1) if name else body.split()[0]
            if word not in STATEMENT_DIRECTIVES:
                raise PTXBuildError(f"declares with .{word}; raw text may declare only .reg "
                                    "(in a scoped block) or give a .pragma (use Kernel.shared, "
                                    "KernelBuilder.param or Module.shared for other state)",
                                    instruction="raw", value=text)
    return code


def register_names(code: str) -> set[str]:
    """The %names in raw code (the builder counts them as written: it cannot see which are)."""
    return set(_REGISTER.findall(code))


def terminated(text: str, code: str) -> str:
    """text with ';' after its last code character unless that already ends a statement."""
    end = len(code.rstrip())
    if end == 0 or code[end - 1] in ";}":
        return text.strip()
    return (text[:end] + ";" + text[end:]).strip()
