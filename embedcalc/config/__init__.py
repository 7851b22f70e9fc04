"""Config schema (pydantic), loading of files, presets and ``--set`` overrides, and validation messages."""
