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

One scan per name for every pattern (issue 39: a million distinct names). A trace of many distinct names
would pay each pattern's word scan per name (~30 patterns, ~45 us per 250-character name). Instead the
words of every pattern made (the vocabulary) are found in a name once, and the name gets a *signature*:
the set of vocabulary words it holds, and the answers of the few regex alternatives those words let
through. Every pattern's answer is a function of the signature (the gate and the plain-text alternatives
read the words, the other alternatives are in it), so `matches` is told once per pattern and signature
and read back for every other name that has it; `by_signature` does the same for a whole classifier
(kernel family, class, tensor-core verdict...) whose name arguments it reads only through patterns. The
words are found per segment of the lowercased name, cut at characters that no word holds (so no word
spans two segments), and the segments repeat across templated names: a name that differs from the
last one only in `variant_123` costs one short scan. `reference_answers()` turns all this off (the tests
hold the fast path to the patterns' own answers with it).

A leaf module: the standard library only (hardware.py, the trace classifiers and the rules use it).
"""

from __future__ import annotations

import contextlib
import functools
import re
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

try:  # Python 3.11+
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # Python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

__all__ = [
    "NamePattern",
    "by_signature",
    "forget_names",
    "reference_answers",
    "required_words",
    "signature",
    "top_level_alternatives",
]

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
    only when the (ASCII) name holds one of its words; the answer is kept per name signature (module
    docstring). `search` is the regex's own search, skipped when the name holds none of the pattern's
    words."""

    __slots__ = ("__weakref__", "_gate", "_literals", "_memo", "_memo_of", "_others", "pattern", "regex", "words")

    def __init__(self, pattern: str, flags: int = re.I) -> None:
        self.regex = re.compile(pattern, flags)
        self.pattern = pattern
        # read off the pattern at first use (module imports stay as cheap as a plain re.compile)
        self.words: tuple[str, ...] | None = None
        self._literals: tuple[str, ...] | None = None
        self._others: tuple[tuple[tuple[str, ...] | None, re.Pattern[str]], ...] = ()
        # every word a match of any alternative needs (None: an alternative that does not say)
        self._gate: tuple[str, ...] | None = None
        # answers per signature, for the vocabulary they were told under
        self._memo: dict[tuple[int, int], bool] = {}
        self._memo_of: _Vocabulary | None = None
        _PATTERNS.add(self)
        _generation[0] += 1

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
        sig = signature(name)
        if sig is None:
            return self._matches(name)
        memo = self._memo
        if self._memo_of is not _vocabulary[0]:
            memo = self._memo = {}
            self._memo_of = _vocabulary[0]
        answer = memo.get(sig)
        if answer is None:
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            answer = memo[sig] = self._matches(name)
        return answer

    def _matches(self, name: str) -> bool:
        """The answer told for this name alone (the reference that signatures are held to)."""
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


# ---- one scan per name: signatures -------------------------------------------------------------------

# Every pattern made (weakly: a pattern made and dropped by a test leaves), and a count that moves
# whenever one is made: a vocabulary read before that is read again.
_PATTERNS: weakref.WeakSet[NamePattern] = weakref.WeakSet()
_generation: list[int] = [0]
_vocabulary: list[_Vocabulary | None] = [None]
_reference: list[bool] = [False]

# Bounds on what is kept (a cache that outgrows its bound is emptied and filled again).
_NAME_LIMIT = 1 << 21  # names and their signatures: one analysis' distinct names (forget_names after)
_SEGMENT_LIMIT = 1 << 16  # segments and their words: the parts that templated names share
_MEMO_LIMIT = 1 << 16  # answers per distinct signature (a handful in real traces)


def _trie_regex(words: list[str]) -> str:
    """A regex matching exactly the `words`, as a trie of nested groups: at a position where several
    words start, the longest is tried first (greedy optional tails), and it backtracks to a shorter one."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for c in word:
            node = node.setdefault(c, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        tails = [re.escape(c) + emit(node[c]) for c in sorted(k for k in node if k)]
        if not tails:
            return ""
        body = tails[0] if len(tails) == 1 else "(?:" + "|".join(tails) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(root)


def _lowercase_form(regex: re.Pattern[str]) -> re.Pattern[str] | None:
    """The same regex without IGNORECASE, for the lowercased name, where that tells the same answer (and
    lets the engine jump to a literal prefix, ~7x faster): a case-insensitive pattern of ASCII whose
    letters are lowercase, whose classes hold no uppercase letter and that sets no flag inline. On an
    ASCII text, such a pattern matches a character exactly when it matches its lowercase."""
    if not regex.flags & re.I or not regex.pattern.isascii():
        return None
    upper = range(ord("A"), ord("Z") + 1)

    def plain(items: Any) -> bool:
        for op, av in items:
            if op in (_LITERAL, _sre_parse.NOT_LITERAL):
                if av in upper:
                    return False
            elif op == _IN:
                for o, v in av:
                    if (o in (_LITERAL, _sre_parse.NOT_LITERAL) and v in upper) or (
                        o == _sre_parse.RANGE and v[0] <= upper[-1] and v[1] >= upper[0]
                    ):
                        return False
            elif op == _SUBPATTERN:
                if av[1] or av[2] or not plain(av[-1]):  # inline flags set or unset
                    return False
            elif op == _BRANCH:
                if not all(plain(alternative) for alternative in av[1]):
                    return False
            elif op in _REPEATS:
                if not plain(av[2]):
                    return False
            elif op in (_sre_parse.ASSERT, _sre_parse.ASSERT_NOT):
                if not plain(av[1]):
                    return False
            elif _ATOMIC is not None and op == _ATOMIC:
                if not plain(av):
                    return False
            elif op == _sre_parse.GROUPREF_EXISTS:
                if not all(plain(branch) for branch in av[1:] if branch is not None):
                    return False
            elif op not in (_sre_parse.ANY, _sre_parse.AT, _sre_parse.GROUPREF):
                return False
        return True

    try:
        parsed = _sre_parse.parse(regex.pattern, regex.flags)
    except re.error:  # pragma: no cover - it compiled once already
        return None
    if not plain(parsed) or parsed.state.flags & ~(re.I | re.U):
        return None
    return re.compile(regex.pattern, regex.flags & ~re.I)


class _Vocabulary:
    """The words of every pattern made, as bits; how to find them in a lowercased name; the regex
    alternatives of every pattern, with the words that let each through."""

    def __init__(self, patterns: list[NamePattern], generation: int) -> None:
        self.generation = generation
        others: dict[tuple[str, int], tuple[tuple[str, ...] | None, re.Pattern[str]]] = {}
        words: set[str] = set()
        for pattern in patterns:
            literals = pattern._literals if pattern._literals is not None else pattern._prepare()
            words.update(literals)
            for needed, regex in pattern._others:
                words.update(needed or ())
                others.setdefault((regex.pattern, regex.flags), (needed, regex))
        ordered = sorted(words, key=lambda w: (-len(w), w))
        bit = {w.encode(): 1 << i for i, w in enumerate(ordered)}
        self.bit = bit
        # the words inside each word found (a word found at a position brings every word it contains),
        # told at its first finding (a trace meets a few dozen words)
        self.closure: dict[bytes, int] = {}
        # at each position, the longest word that starts there (a zero-width match: every position)
        self.finder = re.compile(b"(?=(" + _trie_regex(ordered).encode() + b"))") if ordered else None
        # characters no word holds: a word never spans them, so each segment between them is scanned
        # alone (and told once for every name that shares it). One table lowercases and cuts.
        held = set("".join(ordered))
        cuts = [c for c in map(chr, range(128)) if not c.isalnum() and c not in held]
        self.sep = cuts[0].encode() if cuts else b""
        table = bytearray(range(256))
        table[ord("A") : ord("Z") + 1] = bytes(range(ord("a"), ord("z") + 1))
        for c in cuts:
            table[ord(c)] = table[ord(cuts[0])]
        self.table = bytes(table)
        # (needed words as bits or None, the regex); each one's lowercase form, told when first let through
        self.others = [(None if needed is None else self.mask(needed), regex) for needed, regex in others.values()]
        self.lowercase: dict[re.Pattern[str], re.Pattern[str] | None] = {}
        self.names: dict[str, tuple[int, int]] = {}
        self.bare: set[bytes] = set()  # segments that hold no word
        self.segments: dict[bytes, int] = {}  # segments that hold words: their bits
        self.triggered: dict[int, tuple[tuple[re.Pattern[str], bool], ...]] = {}
        self.interned: dict[tuple[int, int], tuple[int, int]] = {}

    def mask(self, words: tuple[str, ...]) -> int:
        return functools.reduce(int.__or__, (self.bit[w.encode()] for w in words), 0)

    def inside(self, word: bytes) -> int:
        """The bits of every word inside `word`, itself included."""
        bits = self.closure[word] = functools.reduce(int.__or__, (b for v, b in self.bit.items() if v in word), 0)
        return bits

    def through(self, found: int) -> tuple[tuple[re.Pattern[str], bool], ...]:
        """The regex alternatives the words `found` let through, each with whether it runs on the
        lowercased name (its lowercase form) or on the name."""
        out = []
        for needed, regex in self.others:
            if needed is None or needed & found:
                if regex not in self.lowercase:
                    self.lowercase[regex] = _lowercase_form(regex)
                lowered = self.lowercase[regex]
                out.append((lowered or regex, lowered is not None))
        return tuple(out)

    def found(self, name: str) -> int:
        """The bits of the words the lowercased (ASCII) `name` holds."""
        finder = self.finder
        if finder is None:
            return 0
        text = name.encode("ascii").translate(self.table)
        parts = set(text.split(self.sep)) if self.sep else {text}
        parts.difference_update(self.bare)
        segments = self.segments
        found = 0
        for segment in parts:
            bits = segments.get(segment)
            if bits is None:
                bits = 0
                for word in finder.findall(segment):
                    bits |= self.closure.get(word) or self.inside(word)
                if len(segments) + len(self.bare) >= _SEGMENT_LIMIT:
                    segments.clear()
                    self.bare.clear()
                if bits:
                    segments[segment] = bits
                else:
                    self.bare.add(segment)
            found |= bits
        return found

    def signature(self, name: str) -> tuple[int, int]:
        found = self.found(name)
        through = self.triggered.get(found)
        if through is None:
            if len(self.triggered) >= _MEMO_LIMIT:
                self.triggered.clear()
            through = self.triggered[found] = self.through(found)
        answers = 0
        if through:
            low = name.lower()
            for i, (regex, on_lowered) in enumerate(through):
                if regex.search(low if on_lowered else name) is not None:
                    answers |= 1 << i
        sig = (found, answers)
        if len(self.interned) >= _MEMO_LIMIT:
            self.interned.clear()
        return self.interned.setdefault(sig, sig)


def _current() -> _Vocabulary:
    vocabulary = _vocabulary[0]
    if vocabulary is None or vocabulary.generation != _generation[0]:
        vocabulary = _vocabulary[0] = _Vocabulary(list(_PATTERNS), _generation[0])
    return vocabulary


def signature(name: str) -> tuple[int, int] | None:
    """What every pattern's answer for `name` depends on: the vocabulary words the (ASCII) name holds,
    and the answers of the regex alternatives those words let through. None for a name that is not
    ASCII (the patterns then run their regex on it), and under `reference_answers()`."""
    vocabulary = _vocabulary[0]
    if vocabulary is None or vocabulary.generation != _generation[0]:
        vocabulary = _current()
    sig = vocabulary.names.get(name)
    if sig is not None:
        return sig
    if _reference[0] or not name.isascii():
        return None
    sig = vocabulary.signature(name)
    if len(vocabulary.names) >= _NAME_LIMIT:
        vocabulary.names.clear()
    vocabulary.names[name] = sig
    return sig


def forget_names() -> None:
    """Drop the names kept with their signatures (an analysis' distinct names: `analyze` calls this when
    it is done, so that a process analyzing trace after trace keeps none of them)."""
    vocabulary = _vocabulary[0]
    if vocabulary is not None:
        vocabulary.names.clear()
        vocabulary.segments.clear()
        vocabulary.bare.clear()


@contextlib.contextmanager
def reference_answers() -> Iterator[None]:
    """Every pattern and `by_signature` function told for each name alone, as before signatures (tests)."""
    forget_names()
    _reference[0] = True
    try:
        yield
    finally:
        _reference[0] = False


_F = TypeVar("_F", bound=Callable[..., Any])


def by_signature(names: int = 1) -> Callable[[_F], _F]:
    """Keep a function's answers per signature of its first `names` positional arguments (a name, or
    None), and the other arguments as they are. Only for a function that reads those names through
    NamePatterns alone (no `in`, no slicing, no other regex): its answer is then the same for every
    name of one signature. A name that has no signature (not ASCII) or a call with keywords runs the
    function itself."""

    def wrap(function: _F) -> _F:
        state: list[Any] = [None, {}]  # the vocabulary the answers were told under; the answers

        def keyed(args: tuple[Any, ...]) -> Any:
            """The answer for arguments whose names may have no signature yet (the slow path)."""
            key = list(args)
            for i in range(min(names, len(args))):
                arg = args[i]
                if arg is not None:
                    sig = signature(arg) if isinstance(arg, str) else None
                    if sig is None:
                        return function(*args)
                    key[i] = sig
            if state[0] is not _vocabulary[0]:
                state[0], state[1] = _vocabulary[0], {}
            memo = state[1]
            frozen = tuple(key)
            answer = memo.get(frozen, memo)
            if answer is memo:
                if len(memo) >= _MEMO_LIMIT:
                    memo.clear()
                answer = memo[frozen] = function(*args)
            return answer

        @functools.wraps(function)
        def told(*args: Any, **kwargs: Any) -> Any:
            if kwargs:
                return function(*args, **kwargs)
            vocabulary = state[0]
            # the common case first: names already signed, under the current vocabulary, answer kept
            if vocabulary is _vocabulary[0] and vocabulary is not None and vocabulary.generation == _generation[0]:
                known = vocabulary.names
                key = []
                for arg in args[:names]:
                    sig = None if arg is None else known.get(arg) if arg.__class__ is str else False
                    if sig is False or (sig is None and arg is not None):
                        break
                    key.append(sig)
                else:
                    memo = state[1]
                    answer = memo.get((*key, *args[names:]), memo)
                    if answer is not memo:
                        return answer
            return keyed(args)

        return told  # type: ignore[return-value]

    return wrap
