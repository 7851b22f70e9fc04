"""The per-family readers of Hugging Face ``config.json`` files: one module per family or group of families.

Each module exports ``FAMILIES``, a tuple of :class:`~embedcalc.sources.hf.reader.Family` (transformers' config
class, its defaults, the mapping function onto embedcalc's layer model). :mod:`embedcalc.sources.hf.registry` lists
the modules; the machinery they share — the key reader, the accept-list derived from transformers, the core decoder
mapping, quantization formats — stays one level up in :mod:`embedcalc.sources.hf`.
"""
