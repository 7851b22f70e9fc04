"""The bound on every integer embedcalc reads, from a config file or the command line (a leaf module: the CLI's
options use it without loading the config machinery).

No size, count or length of a model has more than a handful of digits; 30 digits (10**30) is 10**17 times the
parameter count of the largest models trained. With every input integer below 10**30, every count embedcalc
derives (a product of at most ten inputs and small constants) stays below 10**300, so that the few places that
turn a count into a float (ratios, units, roofline times) cannot overflow, and int <-> str conversion stays far
below Python's 4,300-digit limit.
"""

import numbers
from collections.abc import Mapping
from typing import Any

# FlashAttention-2 supports head dimensions up to 256 (Dao 2023, README "head dimensions up to 256"): the advisory
# checks warn above it on every analyze, so it lives in this leaf module rather than beside the divisor search.
FLASH_ATTENTION_MAX_HEAD_DIM = 256

# $COLUMNS above this is taken as this (a wider one is a mistake: rich would lay every table and help panel out that
# wide); read by the consoles of render/ and by the CLI before typer draws its help (here: a leaf module)
MAX_COLUMNS = 10_000

MAX_INT_DIGITS = 30

# The layer counts a config.json may give (issue 33). Families whose layers follow a pattern (sliding-window
# layers, MoE placement, hybrid attention/recurrent layers) expand it layer by layer, as transformers' config classes
# do (``layer_types``), so the count bounds their work and memory: 10^29 layers grew `check` to MemoryError. The
# deepest published models have ~100-130 layers (Llama 3.1 405B: 126); 100,000 leaves room for any experiment and
# reads in well under a second. embedcalc's own configs, counted in closed form over runs, keep the 30-digit bound.
# (Here, a leaf module: the family readers check it too, and they are imported by the sources.hf package.)
MAX_HF_LAYERS = 100_000
INT_BOUND = 10**MAX_INT_DIGITS  # integers must satisfy abs(value) < INT_BOUND

# The time model's non-integer inputs (issue 24: `--price-per-hour inf`, `--efficiency 1e-320` printed inf and wrote
# Infinity into JSON). With these bounds and the 30-digit integers, every roofline time, device-hour count and cost
# of a workload embedcalc accepts is a finite float; the JSON writer refuses any that is not, as a last line.
MIN_EFFICIENCY = 1e-4  # 0.01 % of peak: far below any run (well-tuned ones reach 30-60 %)
MAX_PRICE_PER_HOUR = 1e9  # currency units per device-hour: 10^6 times any cloud price


def plain_number(value: Any) -> Any:
    """The one integer contract of the API and the CLI (issue 33): a numpy (or other ``numbers.Integral``) integer
    becomes a Python int and a non-``float`` real (``numpy.float32``) a Python float, before any bound is checked
    or any arithmetic done, so a numpy int64 can neither overflow (``np.int64(2**40) ** 2`` wraps silently) nor
    reach a result that ``json.dumps`` cannot write. numpy's bool becomes a Python bool, which every integer check
    refuses as it refuses ``True``; anything else is returned unchanged."""
    if isinstance(value, bool | int) or type(value) is float:
        return value  # a Python number already (int subclasses included)
    if isinstance(value, float):  # a float subclass (numpy.float64 is one): results must hold plain floats
        return float(value)
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        return bool(value)  # numpy's bool: a bool (refused where an integer is due), never an int
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def plain_numbers(value: Any, depth: int = 0) -> Any:
    """:func:`plain_number` applied through mappings, lists and tuples (a config passed as a dict, an axis as a
    list); deeper than 64 levels is left as it is (the schema refuses it)."""
    if depth > 64:
        return value
    if isinstance(value, Mapping):
        return {k: plain_numbers(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return (
            type(value)(plain_numbers(v, depth + 1) for v in value) if type(value) in (list, tuple) else value
        )
    return plain_number(value)


# plan's real-valued inputs (issue 33: `--rate 5e-324` and `--price-per-hour X=1e308` printed $inf with exit 0,
# `--deadline 5e-324s` raised OverflowError): each is bounded where a plan's arithmetic stays finite and far
# outside what anyone asks. name -> (least, most, unit, example)
PLAN_BOUNDS: dict[str, tuple[float, float, str, str]] = {
    "rate": (1e-6, 1e9, "requests/s", "2.5"),  # one request in ~12 days .. 10^9 requests/s
    "max_ttft": (1e-6, 1e9, "seconds", "0.5"),  # a microsecond .. ~32 years
    "max_tpot": (1e-6, 1e9, "seconds", "0.05"),
    "min_tokens_per_s": (1e-6, 1e15, "tokens/s", "1000"),
    "deadline_s": (1.0, 1e12, "seconds", "30d"),  # a second .. ~31,700 years
}


def plan_number_problem(name: str, value: object) -> str | None:
    """Why ``value`` is not a finite number within ``PLAN_BOUNDS[name]``, or None."""
    least, most, unit, example = PLAN_BOUNDS[name]
    number = _finite_number(value)
    if number is None or not least <= number <= most:
        return f"must be a finite number of {unit} from {least:g} to {most:g}; give e.g. {example}"
    return None


def _finite_number(value: object) -> float | None:
    value = plain_number(value)
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
    value = plain_number(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return "not an integer; give a count such as 8"
    if not 1 <= value < INT_BOUND:
        return f"not a count from 1 to {MAX_INT_DIGITS} digits; give one such as 8"
    return None


# How long `bench --nproc --nnodes M` waits for every node to join the rendezvous before it ends with exit 4 (here,
# not in the API, so that the CLI's option default costs no import: `embedcalc --help` loads no config machinery).
DEFAULT_RDZV_TIMEOUT_S = 300
