"""``embedcalc schema``: the JSON Schema of the config format, for editors' YAML language servers."""

from __future__ import annotations

import json
import sys

from embedcalc.cli.common import FormatOption, OutputFormat, handle_errors


@handle_errors("schema")
def schema_command(format: FormatOption = OutputFormat.json) -> None:
    """Print the JSON Schema of embedcalc's config format (canonical keys); it is JSON in either format."""
    from embedcalc.config.schema import ModelConfig

    schema = ModelConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    sys.stdout.write(json.dumps(schema, indent=2) + "\n")
