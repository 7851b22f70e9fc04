"""Communication (DESIGN.md §11): the volume each collective moves per device (:mod:`.volumes`, which states the
conventions) and the tensors data parallelism moves as PyTorch lays them out (:mod:`.gradient_buckets`)."""
