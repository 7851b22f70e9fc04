"""The one orchestrator (DESIGN.md §7, §13): load -> check -> analyze / plan / sweep / verify / bench, each verb a
module that returns typed results with their warnings, formats nothing and prints nothing.

``import embedcalc`` re-exports the public functions and result types (:mod:`embedcalc`'s ``__all__`` is the
API); the CLI is parse -> one call here -> render -> exit code. The modules, by verb:

- :mod:`~embedcalc.api.load`: a target (preset, file, hub id, mapping, loaded config) to a validated config;
- :mod:`~embedcalc.api.workload`: a :class:`~embedcalc.analysis.workload.Workload` from keyword fields;
- :mod:`~embedcalc.api.analyze`: ``analyze`` and ``compare`` (params, FLOPs, memory), budgets;
- :mod:`~embedcalc.api.check`: ``check``, every target's validity, derived values and suggestions;
- :mod:`~embedcalc.api.timing`: the time options (hardware, efficiency, KV dtype, training run) on an analysis;
- :mod:`~embedcalc.api.serving` and :mod:`~embedcalc.api.plan`: serving memory, and ``plan`` over the catalogue;
- :mod:`~embedcalc.api.sweep`: the grid of ``embedcalc sweep``;
- :mod:`~embedcalc.api.explain`: the questions of ``embedcalc explain``, answered on the config;
- :mod:`~embedcalc.api.catalogue`: the presets and the device catalogue;
- :mod:`~embedcalc.api.heads` and :mod:`~embedcalc.api.schema`: the valid head counts of a width, and the JSON
  Schema of the config format;
- :mod:`~embedcalc.api.checkpoint`: ``verify --checkpoint`` (safetensors headers, no torch);
- the torch side (needs the ``torch`` extra): :mod:`~embedcalc.api.verify`, :mod:`~embedcalc.api.diff`, and the
  measurements :mod:`~embedcalc.api.bench`
  (one timed step, the matmul peak, ``sweep --measure``; the one :class:`~embedcalc.api.bench.RunOptions`),
  :mod:`~embedcalc.api.generate`, :mod:`~embedcalc.api.distributed`, :mod:`~embedcalc.api.memory_matrix`, with
  :mod:`~embedcalc.api.torch_env` saying what to install or which device to use instead;
- :mod:`~embedcalc.api.results`: the result types that have no home in a lower layer.

Nothing is imported here, so that a command loads only the verbs it calls (start-up time).
"""
