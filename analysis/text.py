"""Text as the terminal shows it: lines of at most BRIEF_WIDTH characters, wrapped so that a
command the tool prints (`COMMAND`) is never broken across lines: a reader copies it whole."""

from __future__ import annotations

import re
import textwrap

BRIEF_WIDTH = 120  # the terminal answer's widest line

# a command the tool prints, which a reader copies: never broken across lines
COMMAND = re.compile(r"\b(?:trials|analysis|mlflow|make) (?:run|resume|status|list|augment|time|reeval|recover|validate|"
                     r"report|plan|recap|notebook|export|results|ui|demo|test)(?: (?!--|\()[^\s;,()]+)?"
                     r"(?: --[\w-]+(?: (?!--|\()[^\s;,()]+)?)*")


def wrap_text(text: str, indent: str = "", first: str | None = None) -> list[str]:
    """`text` wrapped to BRIEF_WIDTH, a printed command (COMMAND) always whole on one line."""
    first = indent if first is None else first
    kept = COMMAND.sub(lambda m: m.group().replace(" ", "\u00a0"), text)  # textwrap breaks at ASCII spaces only
    return [line.replace("\u00a0", " ") for line in
            textwrap.wrap(kept, BRIEF_WIDTH, initial_indent=first, subsequent_indent=indent,
                          break_on_hyphens=False, break_long_words=False)] or [first.rstrip()]
