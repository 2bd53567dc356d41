"""Name patterns (kernel and op names) that answer "no" without the regex engine when a name holds none
of the words a match needs.

Python's regex engine tries every alternative of a pattern at every position of the text: a family
pattern of fifteen alternatives costs 20-140 us on one 250-character templated kernel name, and a trace
with a million distinct names (Triton autotuning, a hostile file) pays that per name and per pattern.
Most names hold none of the words a pattern needs, and `in` tells that at memory speed. `NamePattern`
reads the words off the pattern itself (`required_words`: every match contains at least one of them,
case folded) and runs the regex only on a name that holds one of them, so its answers are the regex's
own. Names that are not ASCII always go to the regex (Unicode case folding can match a word that
`str.lower` does not produce).

A leaf module: the standard library only (hardware.py, the trace classifiers and the rules use it).
"""

from __future__ import annotations

import re
from typing import Any

try:  # Python 3.11+
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # Python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

__all__ = ["NamePattern", "required_words", "top_level_alternatives"]

_LITERAL = _sre_parse.LITERAL
_IN = _sre_parse.IN
_BRANCH = _sre_parse.BRANCH
_SUBPATTERN = _sre_parse.SUBPATTERN
_REPEATS = tuple(getattr(_sre_parse, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_sre_parse, n))
_ATOMIC = getattr(_sre_parse, "ATOMIC_GROUP", None)


def _ascii_lower(code: int) -> str | None:
    c = chr(code)
    return c.lower() if c.isascii() else None


def _sequence_words(items: Any) -> frozenset[str] | None:
    """Words one of which every match of the sequence `items` contains (lowercase), or None when no
    such set can be told. Each element that every match passes through gives a candidate set: a run of
    literal characters, a group, a branch whose every alternative has a set, a repeat of at least one;
    the most selective candidate (longest shortest word, then fewest words) is kept."""
    candidates: list[frozenset[str]] = []
    run: list[str] = []

    def close_run() -> None:
        if run:
            candidates.append(frozenset({"".join(run)}))
            run.clear()

    for op, av in items:
        if op == _LITERAL:
            c = _ascii_lower(av)
            if c is None:
                close_run()
            else:
                run.append(c)
            continue
        close_run()
        found: frozenset[str] | None = None
        if op == _SUBPATTERN:
            found = _sequence_words(av[-1])
        elif _ATOMIC is not None and op == _ATOMIC:
            found = _sequence_words(av)
        elif op == _BRANCH:
            words: set[str] = set()
            for alternative in av[1]:
                sub = _sequence_words(alternative)
                if sub is None:
                    words.clear()
                    break
                words |= sub
            found = frozenset(words) if words else None
        elif op in _REPEATS and av[0] >= 1:
            found = _sequence_words(av[2])
        elif op == _IN and av and all(o == _LITERAL for o, _ in av):
            chars = [_ascii_lower(v) for _, v in av]
            found = frozenset(c for c in chars if c is not None) if None not in chars else None
        if found:
            candidates.append(found)
    close_run()
    if not candidates:
        return None
    return max(candidates, key=lambda words: (min(map(len, words)), -len(words)))


def required_words(pattern: str | re.Pattern[str]) -> tuple[str, ...] | None:
    """Lowercase words such that every match of `pattern` (in an ASCII text) contains one of them, or
    None when the pattern does not say (then every text must go to the regex)."""
    if isinstance(pattern, re.Pattern):
        source, flags = pattern.pattern, pattern.flags
    else:
        source, flags = pattern, 0
    if not isinstance(source, str):
        return None
    words = _sequence_words(_sre_parse.parse(source, flags))
    return tuple(sorted(words, key=lambda w: (-len(w), w))) if words else None


def top_level_alternatives(source: str) -> list[str]:
    """`source` split at its top-level `|` (outside groups and character classes)."""
    parts: list[str] = []
    depth, start, i, in_class = 0, 0, 0, False
    while i < len(source):
        c = source[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if source[i + 1 : i + 2] == "]" or source[i + 1 : i + 3] == "^]":  # a `]` first is a member
                i += 2 if source[i + 1] == "]" else 3
                continue
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(source[start:i])
            start = i + 1
        i += 1
    parts.append(source[start:])
    return parts


def _is_literal(source: str, flags: int) -> str | None:
    """The lowercase text of a pattern that is plain ASCII text matched case-insensitively, else None."""
    if not flags & re.I:
        return None
    items = _sre_parse.parse(source, flags)
    chars = [_ascii_lower(av) if op == _LITERAL else None for op, av in items]
    return "".join(chars) if chars and None not in chars else None  # type: ignore[arg-type]


# The name lowercased last: each name is tried against a run of patterns in a row (family, class...).
_last: list[str] = ["", ""]


def _lowered(name: str) -> str:
    if name is not _last[0]:
        _last[0], _last[1] = name, name.lower()
    return _last[1]


class NamePattern:
    """A compiled pattern (case-insensitive unless `flags` says otherwise) for kernel and op names.

    `matches(name)` is `bool(regex.search(name))`, told alternative by alternative: the top-level
    alternatives that are plain text are answered by `in`, each other one is compiled alone and tried
    only when the (ASCII) name holds one of its words. `search` is the regex's own search, skipped when
    the name holds none of the pattern's words."""

    __slots__ = ("_gate", "_literals", "_others", "pattern", "regex", "words")

    def __init__(self, pattern: str, flags: int = re.I) -> None:
        self.regex = re.compile(pattern, flags)
        self.pattern = pattern
        # read off the pattern at first use (module imports stay as cheap as a plain re.compile)
        self.words: tuple[str, ...] | None = None
        self._literals: tuple[str, ...] | None = None
        self._others: tuple[tuple[tuple[str, ...] | None, re.Pattern[str]], ...] = ()
        # every word a match of any alternative needs (None: an alternative that does not say)
        self._gate: tuple[str, ...] | None = None

    def _prepare(self) -> tuple[str, ...]:
        flags = self.regex.flags
        self.words = required_words(self.regex)
        literals, others = [], []
        for source in top_level_alternatives(self.pattern):
            text = _is_literal(source, flags)
            if text is not None:
                literals.append(text)
            else:
                regex = re.compile(source, flags)
                others.append((required_words(regex), regex))
        self._others = tuple(others)
        self._literals = tuple(literals)
        if all(words is not None for words, _ in others):
            self._gate = tuple(dict.fromkeys([*literals, *(w for words, _ in others for w in words or ())]))
        return self._literals

    def matches(self, name: str) -> bool:
        literals = self._literals
        if literals is None:
            literals = self._prepare()
        if not name.isascii():
            return self.regex.search(name) is not None
        lowered = _lowered(name)
        gate = self._gate
        # most names hold no word of the pattern: one scan of them all answers "no"
        if gate is not None and not any(map(lowered.__contains__, gate)):
            return False
        if literals and any(map(lowered.__contains__, literals)):
            return True
        for words, regex in self._others:
            if (words is None or any(map(lowered.__contains__, words))) and regex.search(name) is not None:
                return True
        return False

    def search(self, name: str) -> re.Match[str] | None:
        if self._literals is None:
            self._prepare()
        words = self.words
        if words is not None and name.isascii() and not any(map(_lowered(name).__contains__, words)):
            return None
        return self.regex.search(name)

    def __repr__(self) -> str:
        return f"NamePattern({self.pattern!r}, words={self.words})"
