"""embedcalc: configurator and cost calculator for Transformer models.

The package is split as DESIGN.md §7 describes: ``config`` (schema and loading), ``analysis`` (pure arithmetic),
``modeling`` (the only torch code), ``render`` (the only rich code) and ``cli`` (the glue).
"""

__version__ = "0.1.0"
