"""A progress line for long host work (precompiling, autotuning): tqdm's bar when tqdm is
installed, else one line on stderr, rewritten in place on a terminal and printed per step
elsewhere (a log keeps each step). `enabled=None` shows it only when stderr is a terminal."""
from __future__ import annotations

import sys

__all__ = ["Progress"]


class Progress:
    """`update(note)` after each of `total` steps of `what`; `close()` at the end."""

    def __init__(self, total: int, what: str, enabled: bool | None = None, stream=None):
        self.stream = sys.stderr if stream is None else stream
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = tty if enabled is None else bool(enabled)
        self.total, self.what, self.done, self.tty = total, what, 0, tty
        self.bar = None
        if self.enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, desc=what, file=self.stream, leave=True)

    def update(self, note: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(1)
            if note:
                self.bar.set_postfix_str(note)
            return
        line = f"{self.what}: {self.done}/{self.total}" + (f" ({note})" if note else "")
        self.stream.write(("\r" + line) if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.close()
        elif self.tty:
            self.stream.write("\n")
            self.stream.flush()
