"""The shipped JSON schema (gpuadvisor/schemas/findings.schema.json) against real `to_dict()` outputs."""

from __future__ import annotations

import copy
import json
from importlib.resources import files
from typing import Any

import jsonschema
import pytest

from .results import clean_result, sample_result


def schema() -> dict[str, Any]:
    text = files("gpuadvisor").joinpath("schemas/findings.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def validator() -> jsonschema.Draft202012Validator:
    s = schema()
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def test_schema_is_valid_draft_2020_12() -> None:
    assert schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    validator()


@pytest.mark.parametrize("make", [sample_result, clean_result])
def test_results_validate(make: Any) -> None:
    # through JSON text, as a consumer reads it
    data = json.loads(json.dumps(make().to_dict(), sort_keys=True))
    errors = sorted(validator().iter_errors(data), key=str)
    assert not errors, [e.message for e in errors]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.pop("findings"),
        lambda d: d["findings"][0].pop("impact_explanation"),
        lambda d: d["findings"][0].update(severity="critical"),
        lambda d: d["findings"][0].update(category="gpu"),
        lambda d: d["findings"][0].update(impact=1.5),
        lambda d: d["findings"][0]["locations"][0].update(line="36"),
        lambda d: d["rules"][0].update(status="skipped"),
        lambda d: d["source"].update(kind="folder"),
        lambda d: d["metrics"].update(step_time_ms=[1, 2]),
        lambda d: d.update(schema_version=2),
        lambda d: d.update(extra=True),
    ],
)
def test_schema_rejects_contract_breaks(mutate: Any) -> None:
    data = copy.deepcopy(sample_result().to_dict())
    mutate(data)
    assert list(validator().iter_errors(data)), "schema accepted a broken document"


def test_schema_category_enum_matches_model() -> None:
    from gpuadvisor.model import Category, Severity

    defs = schema()["$defs"]
    assert sorted(defs["category"]["enum"]) == sorted(c.value for c in Category)
    assert sorted(defs["severity"]["enum"]) == sorted(s.value for s in Severity)
