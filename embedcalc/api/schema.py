"""``schema``: the JSON Schema (draft 2020-12) of embedcalc's config format, canonical keys, every field with its
description and bounds, as pydantic derives it from :class:`~embedcalc.config.schema.ModelConfig`
(``embedcalc schema``, for editors' YAML language servers)."""

from __future__ import annotations

from typing import Any

__all__ = ["JSON_SCHEMA_DIALECT", "config_schema"]

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def config_schema() -> dict[str, Any]:
    """The JSON Schema document of the config format, with its ``$schema`` dialect.

    >>> from embedcalc.api.schema import config_schema
    >>> s = config_schema()
    >>> s["$schema"], s["additionalProperties"], {"embed_dim", "num_heads"} <= set(s["properties"])
    ('https://json-schema.org/draft/2020-12/schema', False, True)
    """
    from embedcalc.config.schema import ModelConfig

    schema = ModelConfig.model_json_schema()
    schema["$schema"] = JSON_SCHEMA_DIALECT
    return schema
