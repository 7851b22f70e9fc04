"""``plan``, the inverse question (DESIGN.md §15, §17): the rows and their result (:mod:`.rows`, which states the
conventions), the serving search (:mod:`.serving`) with its queue model (:mod:`.queue`), and the training search
(:mod:`.training`)."""
