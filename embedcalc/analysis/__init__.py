"""Pure arithmetic on a model config: parameter counts, FLOPs, memory, head-shape advice.

Nothing here imports torch, rich or typer, and nothing here shares code with ``embedcalc.modeling``: the two are
independent implementations that ``embedcalc verify`` reconciles.
"""
