"""The bound on every integer embedcalc reads, from a config file or the command line (a leaf module: the CLI's
options use it without loading the config machinery).

No size, count or length of a model has more than a handful of digits; 30 digits (10**30) is 10**17 times the
parameter count of the largest models trained. With every input integer below 10**30, every count embedcalc
derives (a product of at most ten inputs and small constants) stays below 10**300, so that the few places that
turn a count into a float (ratios, units, roofline times) cannot overflow, and int <-> str conversion stays far
below Python's 4,300-digit limit.
"""

MAX_INT_DIGITS = 30
INT_BOUND = 10**MAX_INT_DIGITS  # integers must satisfy abs(value) < INT_BOUND
