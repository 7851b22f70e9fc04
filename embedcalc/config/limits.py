"""The bound on every integer embedcalc reads, from a config file or the command line (a leaf module: the CLI's
options use it without loading the config machinery).

No size, count or length of a model has more than a handful of digits; 30 digits (10**30) is 10**17 times the
parameter count of the largest models trained. With every input integer below 10**30, every count embedcalc
derives (a product of at most ten inputs and small constants) stays below 10**300, so that the few places that
turn a count into a float (ratios, units, roofline times) cannot overflow, and int <-> str conversion stays far
below Python's 4,300-digit limit.
"""

# FlashAttention-2 supports head dimensions up to 256 (Dao 2023, README "head dimensions up to 256"): the advisory
# checks warn above it on every analyze, so it lives in this leaf module rather than beside the divisor search.
FLASH_ATTENTION_MAX_HEAD_DIM = 256

MAX_INT_DIGITS = 30
INT_BOUND = 10**MAX_INT_DIGITS  # integers must satisfy abs(value) < INT_BOUND

# The time model's non-integer inputs (issue 24: `--price-per-hour inf`, `--efficiency 1e-320` printed inf and wrote
# Infinity into JSON). With these bounds and the 30-digit integers, every roofline time, device-hour count and cost
# of a workload embedcalc accepts is a finite float; the JSON writer refuses any that is not, as a last line.
MIN_EFFICIENCY = 1e-4  # 0.01 % of peak: far below any run (well-tuned ones reach 30-60 %)
MAX_PRICE_PER_HOUR = 1e9  # currency units per device-hour: 10^6 times any cloud price


def _finite_number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if number == number and abs(number) != float("inf") else None


def efficiency_problem(value: object) -> str | None:
    """Why ``value`` is not a fraction of peak the time model takes ([MIN_EFFICIENCY, 1]), or None; the reason
    is a phrase to follow the value, as in the other rules here."""
    number = _finite_number(value)
    if number is None or not MIN_EFFICIENCY <= number <= 1:
        return f"not a fraction in [{MIN_EFFICIENCY:g}, 1]; give e.g. 0.6 (60 % of peak)"
    return None


def price_problem(value: object) -> str | None:
    """Why ``value`` is not a price per device-hour (finite, 0 to MAX_PRICE_PER_HOUR), or None."""
    number = _finite_number(value)
    if number is None or not 0 <= number <= MAX_PRICE_PER_HOUR:
        return f"not a finite price from 0 to {MAX_PRICE_PER_HOUR:g} per device-hour; give e.g. 2.5"
    return None


def count_problem(value: object) -> str | None:
    """Why ``value`` is not a count (an integer from 1 to below 10^MAX_INT_DIGITS), or None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return "not an integer; give a count such as 8"
    if not 1 <= value < INT_BOUND:
        return f"not a count from 1 to {MAX_INT_DIGITS} digits"
    return None


# How long `bench --nproc --nnodes M` waits for every node to join the rendezvous before it ends with exit 4 (here,
# not in the API, so that the CLI's option default costs no import: `embedcalc --help` loads no config machinery).
DEFAULT_RDZV_TIMEOUT_S = 300
