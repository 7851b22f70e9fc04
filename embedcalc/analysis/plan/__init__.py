"""``plan``, the inverse question (DESIGN.md §15, §17): the rows and their result (:mod:`.rows`, which states the
conventions), the serving search (:mod:`.serving`, attention-DP + EP in :mod:`.expert_parallel`) with its
continuous-batching scheduler (:mod:`.scheduler`, step costs :mod:`.steps`), and the training search
(:mod:`.training`)."""
