"""The model config (DESIGN.md §3, §9, §16): the schema (pydantic, bounded fields), its cross-field rules
(``rules/``), the layer model's specs, the record mirror that shipped presets are built as, the resolved view every
count reads, and validation problems turned into messages. Reading files, presets and Hugging Face configs is
:mod:`embedcalc.sources`; the devices are :mod:`embedcalc.devices`. Nothing here imports either."""
