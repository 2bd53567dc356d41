"""Issue 39 (a million distinct kernel names): one scan per name answers every pattern and classifier
exactly as each pattern told alone did.

`gpuadvisor/namepattern.py` finds every pattern's words in a name once (per segment between characters
no word holds) and keeps each answer per name signature. These tests hold that fast path to the
reference (`reference_answers()`: every pattern and classifier told for each name alone) on the REAL
kernel, op and runtime names of the sample recordings and on SYNTHETIC names built here from the
patterns' own words (overlapping and nested words, words cut by separators, case changes, digits,
non-ASCII letters), and count the work per name.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

import gpuadvisor
import gpuadvisor.namepattern as np_
from gpuadvisor.hardware import tensor_core_from_name
from gpuadvisor.namepattern import NamePattern, by_signature, forget_names, reference_answers, signature
from gpuadvisor.stepmodel.build import kernel_origin
from gpuadvisor.stepmodel.kernels import _name_dtype
from gpuadvisor.trace.kernels import FAMILIES, kernel_class, kernel_family
from tests.reliability.test_trace_content import _TEMPLATED
from tests.trace.test_namepattern import package_patterns, sample_names

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"
OPS = ("", "aten::mm", "aten::convolution_backward", "aten::_efficient_attention_forward", "aten::native_layer_norm",
       "aten::copy_", "aten::sum", "aten::cudnn_convolution", "aten::EFFICIENT_ATTENTION", "autograd::engine::x")  # fmt: skip


def vocabulary() -> list[str]:
    return sorted(w.decode() for w in np_._current().bit)


def synthetic_names(n: int, seed: int) -> list[str]:
    """SYNTHETIC names from the vocabulary: words whole and cut, two words overlapping or nested, joined
    by separators that words hold and that they do not, in mixed case, with digits and a few non-ASCII
    letters (which the patterns must tell by their regex)."""
    rng = random.Random(seed)
    words = vocabulary()
    joins = ["", "_", " ", "::", "<", ", ", "(", ")>", "#", "-", ".", "\t", "q", "7"]

    def piece() -> str:
        w = rng.choice(words)
        r = rng.random()
        if r < 0.15:  # cut: a word that must not be found
            k = rng.randrange(1, max(2, len(w)))
            w = w[:k] if rng.random() < 0.5 else w[k:]
        elif r < 0.3:  # two words sharing letters: w's tail is v's head, or v inside w
            v = rng.choice(words)
            k = rng.randrange(0, min(len(w), len(v)) + 1)
            w = w + v[k:] if w.endswith(v[:k]) else w[: len(w) // 2] + v + w[len(w) // 2 :]
        elif r < 0.35:
            w += str(rng.randrange(1000))
        return w

    out = []
    for _ in range(n):
        name = "".join(piece() + rng.choice(joins) for _ in range(rng.randrange(1, 7)))
        if rng.random() < 0.5:
            name = "".join(c.upper() if rng.random() < 0.3 else c for c in name)
        if rng.random() < 0.03:
            name = rng.choice(["\u017f", "\u212a", "\u0130", "é"]) + name
        out.append(name)
    return out


def all_names() -> list[str]:
    return [*sample_names(), *synthetic_names(6000, 39), "", " ", "x" * 300, _TEMPLATED.format(i=7)]


def test_words_found_are_the_words_in_the_name() -> None:
    """Per segment, the longest word at each position and the words inside it: every vocabulary word
    that occurs in the lowercased name is found (nested and overlapping words included), no other."""
    v = np_._current()
    assert v.finder is not None and v.sep  # a vocabulary and characters that no word holds
    words = {w.decode(): b for w, b in v.bit.items()}
    checked = 0
    for name in all_names():
        if not name.isascii():
            continue
        lowered = name.lower()
        expected = sum(b for w, b in words.items() if w in lowered)
        assert v.found(name) == expected, (name, [w for w, b in words.items() if b & (v.found(name) ^ expected)])
        checked += 1
    assert checked > 5000
    # the nested and overlapping cases, spelled out
    for name, inside in (("fmha_cutlassF_f32_x", {"fmha", "fmha_cutlass", "cutlass"}), ("all_reduce_scatter", {"reduce", "scatter"})):
        found = v.found(name)
        assert all(words[w] & found for w in inside), name


def test_every_pattern_tells_the_regex_answer_through_signatures() -> None:
    """Every pattern of the package, asked for names in an order where many names share a signature
    (the first of them decides the kept answer), answers what its regex says for each name."""
    names = all_names()
    random.Random(7).shuffle(names)
    forget_names()
    for where, pattern in package_patterns():
        for name in names:
            assert pattern.matches(name) == (pattern.regex.search(name) is not None), (where, name)


def test_lowercase_forms_answer_as_the_case_insensitive_regex() -> None:
    """The regex alternatives run on the lowercased name without IGNORECASE tell what the original
    regex tells on the name; those that could differ keep IGNORECASE."""
    v = np_._current()
    converted = [(regex, lowered) for _, regex in v.others if (lowered := np_._lowercase_form(regex)) is not None]
    assert len(converted) > 20
    assert np_._lowercase_form(re.compile(r"\bhip[A-Z_]", re.I)) is None  # an uppercase class
    assert np_._lowercase_form(re.compile(r"fmhaSm\d", re.I)) is None  # an uppercase letter
    assert np_._lowercase_form(re.compile(r"x[0-a]", re.I)) is None  # a range over uppercase letters
    assert np_._lowercase_form(re.compile(r"a(?-i:b)", re.I)) is None  # a flag set inline
    assert np_._lowercase_form(re.compile(r"lamb(?!da)", re.I)) is not None
    for name in all_names():
        if name.isascii():
            for regex, lowered in converted:
                assert (regex.search(name) is None) == (lowered.search(name.lower()) is None), (regex.pattern, name)


def _told(names: list[str]) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for i, name in enumerate(names):
        fam = FAMILIES[i % len(FAMILIES)]
        op = OPS[i % len(OPS)]
        out.append(
            (
                kernel_family(name),
                kernel_class(name, op or None, None),
                kernel_class(name, op, fam),
                kernel_class(op, name, fam),  # an op name where the kernel name goes, and back
                tensor_core_from_name(name),
                _name_dtype(name),
                kernel_origin(name, fam),
            )
        )
    return out


def test_classifiers_kept_per_signature_answer_as_told_per_name() -> None:
    """kernel_family, kernel_class, the tensor-core verdict, the name dtype and the origin, kept per
    signature, answer for every name what each told for that name alone (the reference)."""
    names = all_names()
    random.Random(11).shuffle(names)
    forget_names()
    fast = _told(names)
    with reference_answers():
        reference = _told(names)
    assert fast == reference
    assert len({t[1] for t in fast}) >= 8  # the names reach most classes


def test_work_per_name_is_one_scan() -> None:
    """20,000 distinct templated names (each differs in one number) through every classifier: each
    pattern is told once per signature, not once per name, and each name costs one scan of the one
    segment it does not share (before: ~30 word scans per name)."""
    names = [_TEMPLATED.format(i=i) for i in range(20_000)]
    forget_names()
    told = 0
    scans = 0
    original = NamePattern._matches

    def counted(self: NamePattern, name: str) -> bool:
        nonlocal told
        told += 1
        return original(self, name)

    v = np_._current()
    finder = v.finder
    assert finder is not None

    class CountingFinder:
        def findall(self, text: bytes) -> list[bytes]:
            nonlocal scans
            scans += 1
            return finder.findall(text)  # type: ignore[union-attr]

    v.finder = CountingFinder()  # type: ignore[assignment]
    NamePattern._matches = counted  # type: ignore[method-assign]
    try:
        answers = {(kernel_family(n), kernel_class(n), tensor_core_from_name(n), _name_dtype(n), kernel_origin(n, "elementwise")) for n in names}
    finally:
        NamePattern._matches = original  # type: ignore[method-assign]
        v.finder = finder
    assert answers == {("elementwise", "elementwise", None, "", "aten")}
    # a few signatures (a number holding a word such as `1688` or `884` is one more), each pattern told
    # at most once for each; one scan per name, and once for each shared segment
    signatures = {signature(n) for n in names}
    assert len(signatures) <= 10
    assert told <= len(signatures) * len(package_patterns()), told
    assert scans < len(names) + 100, scans


def test_a_pattern_made_later_is_part_of_the_scan() -> None:
    """A pattern made after names were scanned (a user's rule module) starts a new vocabulary: its
    words are found in names that were scanned before it existed."""
    name = "my_kernel_zqxwv_thing"
    assert signature(name) is not None
    late = NamePattern(r"zqxwv")
    assert late.matches(name) and late.matches(name.upper())
    assert not late.matches("my_kernel_zqxw_thing")


def test_names_are_not_kept_past_an_analysis() -> None:
    """The names and their signatures are forgotten when `analyze` is done (a process may analyze trace
    after trace); a name that is not ASCII has no signature (its patterns run their regex)."""
    for i in range(50):
        signature(f"kernel_{i}")
    assert len(np_._current().names) >= 50
    gpuadvisor.analyze(SAMPLES / "control_inference-planted")
    assert np_._current().names == {}
    assert signature("gemm\u212a") is None


def test_names_past_the_bound_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(np_, "_NAME_LIMIT", 10)
    forget_names()
    for i in range(25):
        signature(f"kernel_{i}")
    assert len(np_._current().names) <= 10


def test_by_signature_runs_the_function_for_what_has_no_signature() -> None:
    calls: list[object] = []

    @by_signature(names=1)
    def told(name: str | None, extra: int) -> str:
        calls.append(name)
        return f"{name}:{extra}"

    assert told("a_gemm_1", 1) == "a_gemm_1:1"
    assert told("a_gemm_2", 1) == "a_gemm_1:1"  # the same signature: the answer kept (a pure function's)
    assert told("a_gemm_2", 2) == "a_gemm_2:2"  # the other arguments are part of the key
    assert told(None, 1) == "None:1"
    assert told("\u212a", 1) == "\u212a:1" and told("\u212a", 1) == "\u212a:1"  # no signature: told each time
    assert told(name="a_gemm_9", extra=1) == "a_gemm_9:1"  # keywords: told each time
    assert calls == ["a_gemm_1", "a_gemm_2", None, "\u212a", "\u212a", "a_gemm_9"]
