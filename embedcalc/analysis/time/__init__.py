"""The expected-time model (DESIGN.md §14): :mod:`.model` states its conventions and the achieved fractions,
:mod:`.expected` the terms of an inference phase, :mod:`.comm` communication on the critical path, :mod:`.schedule`
a training step's schedule, and :mod:`.estimate` puts them together per phase beside the roofline's lower bound."""
