"""Reading what a TARGET names (DESIGN.md §7): preset names, YAML/JSON config files and their numbers, ``--set``
overrides and key aliases, Hugging Face ``config.json`` files (``hf/``: one module per family group and a
registry), hub ids from the local cache, and checkpoint headers. Everything here ends in the config schema
(:mod:`embedcalc.config`); nothing in the schema imports this package."""
