"""``embedcalc schema``: the JSON Schema of the config format (:func:`embedcalc.api.schema.config_schema`), for
editors' YAML language servers."""

from __future__ import annotations

import json
import sys

from embedcalc.cli.common import FormatOption, OutputFormat, handle_errors


@handle_errors("schema")
def schema_command(format: FormatOption = OutputFormat.json) -> None:
    """Print the JSON Schema of embedcalc's config format (canonical keys); it is JSON in either format."""
    from embedcalc.api.schema import config_schema

    sys.stdout.write(json.dumps(config_schema(), indent=2) + "\n")
