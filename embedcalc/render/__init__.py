"""Presentation: units, rich tables, CSV/Markdown. The only package that imports rich."""
