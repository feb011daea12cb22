"""A small JSON-schema checker for tool arguments.

Only what tool declarations use: an object with typed `properties`, `required`,
`additionalProperties: false`, `enum`, `minimum`/`maximum`. Its job is to turn a model's
mistake into one line the model can read and fix, so it returns messages, never raises.
"""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _type_ok(value: Any, expected: str) -> bool:
    if expected in ("integer", "number") and isinstance(value, bool):
        return False
    if expected == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(expected, (object,)))


def validate_arguments(args: dict[str, Any], schema: dict[str, Any]) -> tuple[dict, list[str]]:
    """Check `args` against an object schema.

    Returns the arguments with integral floats turned into ints (`3.0` → `3` for an
    "integer" parameter) and a list of problems; an empty list means valid.
    """
    if not isinstance(args, dict):
        return {}, [f"arguments must be an object, got {type(args).__name__}"]
    props: dict[str, dict] = schema.get("properties", {})
    problems: list[str] = []
    out = dict(args)
    for name in schema.get("required", []):
        if name not in args:
            problems.append(f"missing required argument '{name}'")
    if schema.get("additionalProperties") is False:
        for name in args:
            if name not in props:
                allowed = ", ".join(props) or "none"
                problems.append(f"unknown argument '{name}' (allowed: {allowed})")
    for name, value in args.items():
        spec = props.get(name)
        if spec is None:
            continue
        expected = spec.get("type")
        kinds = expected if isinstance(expected, list) else [expected] if expected else []
        if kinds and not any(_type_ok(value, k) for k in kinds):
            problems.append(
                f"argument '{name}' must be {' or '.join(kinds)}, got {_json_type(value)}"
            )
            continue
        if "integer" in kinds and isinstance(value, float):
            out[name] = int(value)
        if "enum" in spec and value not in spec["enum"]:
            problems.append(f"argument '{name}' must be one of {spec['enum']}, got {value!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in spec and value < spec["minimum"]:
                problems.append(f"argument '{name}' must be >= {spec['minimum']}, got {value}")
            if "maximum" in spec and value > spec["maximum"]:
                problems.append(f"argument '{name}' must be <= {spec['maximum']}, got {value}")
    return out, problems


def _json_type(value: Any) -> str:
    for name, types in _TYPES.items():
        if isinstance(value, bool):
            return "boolean"
        if isinstance(value, types):
            return name
    return type(value).__name__
