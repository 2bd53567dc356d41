"""Name patterns with a word gate (gpuadvisor/namepattern.py): the gate only ever skips the regex for a
name the regex cannot match, so every answer is the regex's own. Checked on the words read off tricky
patterns, on every kernel, op and runtime name of the REAL sample recordings against every pattern of
the package, and on SYNTHETIC names built here (each pattern's own words, case changes, non-ASCII)."""

from __future__ import annotations

import gzip
import importlib
import re
from functools import cache
from pathlib import Path

import orjson
import pytest

from gpuadvisor.namepattern import NamePattern, required_words, top_level_alternatives

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"
MODULES = (
    "gpuadvisor.hardware",
    "gpuadvisor.trace.kernels",
    "gpuadvisor.trace.kind",
    "gpuadvisor.stepmodel.build",
    "gpuadvisor.stepmodel.kernels",
    "gpuadvisor.stepmodel.layout",
    "gpuadvisor.rulekit.gpuwork",
)


def test_words_read_off_patterns() -> None:
    assert required_words(r"nccl|all_?reduce") == ("reduce", "nccl")
    assert required_words(r"[shi](?:884|1688|16816)") == ("16816", "1688", "884")
    assert required_words(r"cudnn::.*(?:fwd|bwd)") == ("cudnn::",)
    assert required_words(r"lamb(?!da)|(?<![a-z])lion") == ("lamb", "lion")
    assert required_words(re.compile(r"\bSUM\b", re.I)) == ("sum",)  # lowercase, word boundaries apart
    assert required_words(r"x+yz") == ("yz",)  # a repeat of at least one: its body, the longest run kept
    # an alternative with no word of its own (an empty one, a class, an optional part): no gate
    assert required_words(r"nccl|") is None
    assert required_words(r"nccl|[a-z]+") is None
    assert required_words(r"nccl|(?:ab)?") is None
    assert required_words(r"\u017fm80") == ("m80",)  # a non-ASCII letter is no word (case folding)


def test_top_level_alternatives() -> None:
    assert top_level_alternatives(r"a|b(c|d)|[|]x|\|y|e") == ["a", "b(c|d)", "[|]x", r"\|y", "e"]
    assert top_level_alternatives(r"[]|]|q") == ["[]|]", "q"]
    assert top_level_alternatives(r"[^]|]z|w") == ["[^]|]z", "w"]
    assert top_level_alternatives("plain") == ["plain"]


@cache
def sample_names() -> tuple[str, ...]:
    """The event names of a quarter of the REAL sample recordings (kernels, ops, runtime calls,
    annotations; reading all 81 traces takes half a minute)."""
    names: set[str] = set()
    for trace in sorted(SAMPLES.glob("*/trace/*.json.gz"))[::4]:
        for event in orjson.loads(gzip.decompress(trace.read_bytes())).get("traceEvents", []):
            if isinstance(event, dict) and isinstance(event.get("name"), str):
                names.add(event["name"])
    return tuple(sorted(names))


def package_patterns() -> list[tuple[str, NamePattern]]:
    found = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for attr, value in vars(module).items():
            values = [value] if isinstance(value, NamePattern) else []
            if isinstance(value, tuple):  # the family and dtype tables
                values = [v for item in value if isinstance(item, tuple) for v in item if isinstance(v, NamePattern)]
            found.extend((f"{module_name}.{attr}", v) for v in values)
    return found


def synthetic_names(pattern: NamePattern) -> list[str]:
    """SYNTHETIC names around a pattern's words: each word alone, inside a long templated name, in upper
    case, next to a letter that a lookaround refuses, and with non-ASCII letters that fold to ASCII."""
    words = [w for source in top_level_alternatives(pattern.pattern) for w in (required_words(source) or ())]
    out = []
    for w in words:
        out += [w, w.upper(), f"void at::native::kernel<{w}, float>(int)", f"x{w}da", f"_{w}_", f"{w}\u017f", f"\u212a{w}"]
    return out


def test_there_are_patterns_to_check() -> None:
    assert len(package_patterns()) >= 40
    assert len(sample_names()) > 300


@pytest.mark.parametrize(
    "where,pattern,every",
    [
        *((w, p, 10) for w, p in package_patterns()),  # every 10th sample name in the quick tier
        *(pytest.param(w, p, 1, marks=pytest.mark.slow) for w, p in package_patterns()),
    ],
    ids=lambda v: v if isinstance(v, str) else str(v) if isinstance(v, int) else "",
)
def test_gated_answers_are_the_regex_answers(where: str, pattern: NamePattern, every: int) -> None:
    names = [*sample_names()[::every], *synthetic_names(pattern), "", "\u017fgemm", "GEMM", "s\u0130mt"]
    for name in names:
        expected = pattern.regex.search(name)
        assert pattern.matches(name) == (expected is not None), (where, name)
        found = pattern.search(name)
        assert (found is None) == (expected is None) and (found is None or found.span() == expected.span()), (where, name)


def test_the_gate_is_what_saves_time() -> None:
    # a 250-character name holding none of the words: answered without the regex engine
    p = NamePattern(r"gemm|nvjet|cutlass|cublas|matmul|gemv|\bdot_kernel|hmma|wgmma|gmma")
    name = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::AddFunctor<float>>(x)" * 2
    assert p.matches(name) is False

    class Exploding:
        def search(self, _name: str) -> None:
            raise AssertionError("the regex ran")

    p.regex = Exploding()  # type: ignore[assignment]
    for _, regex in p._others:
        assert regex.pattern != "gemm"
    p._others = tuple((w, Exploding()) for w, _ in p._others)  # type: ignore[misc]
    assert p.matches(name) is False  # no regex ran: no word of the pattern is in the name
