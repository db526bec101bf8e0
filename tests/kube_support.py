"""What the tests can check of a Kubernetes manifest without a cluster: a CRD's own schema (strict: an unknown field
is an error, as the API server would silently prune it) and the Kubernetes Python client's models (an object that
loses a field when read into its model fails)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml


def strict(node: Any) -> None:
    """An object schema with properties accepts no other key (the API server would prune it without a word)."""
    if isinstance(node, dict):
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for value in node.values():
            strict(value)
    elif isinstance(node, list):
        for value in node:
            strict(value)


def crd_validator(crd_file: Path, source: str, kind: str, version: str) -> Any:
    """A jsonschema validator of ``kind`` at ``version`` from the CRD fixture, whose first line names its source."""
    import jsonschema

    text = crd_file.read_text(encoding="utf-8")
    assert text.splitlines()[0].startswith(f"# Source: {source}"), text.splitlines()[0]
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert crd["spec"]["names"]["kind"] == kind
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = copy.deepcopy(found["schema"]["openAPIV3Schema"])
    strict(schema)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


def schema_errors(validator: Any, doc: dict[str, Any]) -> list[str]:
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5]]


def round_trip(data: dict[str, Any], model: str) -> dict[str, Any]:
    """``data`` read into the Kubernetes client's ``model`` and written back out."""
    from kubernetes.client import ApiClient

    api = ApiClient()
    # The client's own reader of API responses (what ``deserialize`` calls after json.loads), from a JSON copy.
    obj = api._ApiClient__deserialize(json.loads(json.dumps(data)), model)  # type: ignore[attr-defined]
    return api.sanitize_for_serialization(obj)
