"""The config schema's cross-field rules (DESIGN.md §3, §9): mixins of :class:`embedcalc.config.schema.ModelConfig`
whose field validators check one field against the others, so that an error names the field at fault — the flat
shape (:mod:`.shape`), the layer model's fields (:mod:`.layers`) and one spec against the shape
(:mod:`.spec_checks`), Gemma 3n's residual-stream parts (:mod:`.altup`)."""
