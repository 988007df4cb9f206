"""A one-line progress display for long simulations: rewritten in place on a terminal, a line every few
seconds otherwise (logs, CI), nothing when disabled."""

import sys
import time

__all__ = ["ProgressLine"]


class ProgressLine:
    """``update(text)`` shows ``text`` as the current state; ``done(text)`` ends the line.

    On a terminal the line is rewritten in place; on anything else (a pipe, a log file) at most one line is
    written every ``every_s`` seconds, so long runs stay visible without flooding the log."""

    def __init__(self, stream=None, every_s=10.0, enabled=True):
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every_s = every_s
        self.enabled = enabled
        self._last = None
        self._width = 0

    def update(self, text):
        """Show ``text`` (on a terminal at once; elsewhere if ``every_s`` passed since the last line)."""
        if not self.enabled:
            return
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            now = time.monotonic()
            if self._last is not None and now - self._last < self.every_s:
                return
            self._last = now
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self, text=None):
        """End the progress line (with ``text`` as its final state, if given)."""
        if not self.enabled:
            return
        if self.tty:
            final = text or ""
            self.stream.write("\r" + final + " " * max(0, self._width - len(final)) + "\n")
        elif text:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._width = 0
