"""Typed results that put an analytic number beside its torch or measured counterpart (verify, bench, diff,
generation, distributed). May import analysis and modeling, which never import each other (DESIGN.md §7)."""
