"""Divisor arithmetic of head shapes, bounded in work for any integer: factorisation, divisor listing, nearest
divisors and multiples.

A leaf module (no imports from the package): the schema's validation messages and ``embedcalc heads`` both use it.

The bounds (the work never depends on how hard ``n`` is to factor):

- trial division by every integer up to :data:`TRIAL_DIVISION_LIMIT` (2**16), so every prime factor below it is
  found, with its multiplicity, for any ``n``;
- then Pollard's rho (Brent's variant) for what is left, with at most :data:`RHO_STEP_BUDGET` steps in all. A part
  it cannot split within the budget stays an unsplit *cofactor*: a known divisor of ``n`` whose prime factors are
  all above 2**16. Every divisor of ``n`` up to 2**16 is therefore always known exactly;
- a divisor listing holds at most :data:`MAX_LISTED_DIVISORS` values, the smallest ones, generated in increasing
  order without building the full (possibly astronomically long) list.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from math import gcd, prod

# FlashAttention-2's largest head dimension, for the heads table and explain (kept in the leaf module limits, which
# the advisory checks of every analyze read without loading the divisor search)
from embedcalc.config.limits import FLASH_ATTENTION_MAX_HEAD_DIM as FLASH_ATTENTION_MAX_HEAD_DIM

# head_dim values of published models (BERT, GPT-2/3, LLaMA: 64 or 128); `embedcalc heads` marks them.
USUAL_HEAD_DIMS = (64, 128)

TRIAL_DIVISION_LIMIT = 1 << 16
RHO_STEP_BUDGET = 200_000
MAX_LISTED_DIVISORS = 10_000
NEAREST_SEARCH_STEPS = 1 << 16  # candidates tried on each side of the target by nearest_divisors

_MR_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)


def _is_probable_prime(n: int) -> bool:
    """Miller-Rabin with the first 12 prime bases: deterministic for n < 3.3e24, overwhelmingly right beyond."""
    if n < 2:
        return False
    for p in _MR_BASES:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in _MR_BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


class _Budget:
    """Pollard rho steps left for one factorisation."""

    def __init__(self, steps: int) -> None:
        self.left = steps


def _pollard_rho(n: int, budget: _Budget) -> int | None:
    """A non-trivial factor of the odd composite ``n`` (Brent's variant), or None when the budget runs out."""
    c = 0
    while budget.left > 0:
        c += 1
        y, m, g, r, q = 2, 128, 1, 1, 1
        x = ys = y
        while g == 1 and budget.left > 0:
            x = y
            for _ in range(r):
                y = (y * y + c) % n
            k = 0
            while k < r and g == 1:
                ys = y
                for _ in range(min(m, r - k)):
                    y = (y * y + c) % n
                    q = q * abs(x - y) % n
                g = gcd(q, n)
                k += m
            budget.left -= 2 * r
            r *= 2
        if g == 1:
            return None
        if g == n:
            g = 1
            while g == 1 and budget.left > 0:
                ys = (ys * ys + c) % n
                g = gcd(abs(x - ys), n)
                budget.left -= 1
        if 1 < g < n:
            return g
    return None


@dataclass(frozen=True)
class Factorisation:
    """``n`` = product of ``primes`` (p: exponent) x ``cofactor``; ``cofactor`` is 1 when the factorisation is
    complete, else a composite divisor of ``n`` not split within the budget (all its prime factors > 2**16)."""

    n: int
    primes: dict[int, int]
    cofactor: int = 1

    @property
    def complete(self) -> bool:
        return self.cofactor == 1

    @property
    def divisor_count(self) -> int | None:
        """How many divisors ``n`` has (None when the factorisation is incomplete)."""
        return prod(e + 1 for e in self.primes.values()) if self.complete else None


def factorise(n: int, step_budget: int = RHO_STEP_BUDGET) -> Factorisation:
    """Factor ``n`` >= 1 within the bounds of this module (trial division to 2**16, then a rho step budget)."""
    if n < 1:
        raise ValueError(f"factorise needs a positive integer, got {n}")
    out: dict[int, int] = {}
    rest = n
    for p in _trial_divisors():
        if p * p > rest:
            break
        while rest % p == 0:
            out[p] = out.get(p, 0) + 1
            rest //= p
    if 1 < rest < TRIAL_DIVISION_LIMIT**2:  # no factor up to its square root: prime
        out[rest] = out.get(rest, 0) + 1
        rest = 1
    budget = _Budget(step_budget)
    unsplit = 1
    stack = [rest] if rest > 1 else []
    while stack:
        m = stack.pop()
        if _is_probable_prime(m):
            out[m] = out.get(m, 0) + 1
            continue
        f = _pollard_rho(m, budget)
        if f is None:
            unsplit *= m
            continue
        stack += [f, m // f]
    return Factorisation(n, dict(sorted(out.items())), unsplit)


def _trial_divisors() -> list[int]:
    if not _TRIAL:
        sieve = bytearray([1]) * TRIAL_DIVISION_LIMIT
        sieve[0:2] = b"\x00\x00"
        for i in range(2, int(TRIAL_DIVISION_LIMIT**0.5) + 1):
            if sieve[i]:
                sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
        _TRIAL.extend(i for i, is_prime in enumerate(sieve) if is_prime)
    return _TRIAL


_TRIAL: list[int] = []


def prime_factors(n: int) -> dict[int, int]:
    """Prime factorisation {p: exponent} of ``n`` >= 1 as far as the bounds reach (an unsplit cofactor appears
    as one entry; see :func:`factorise` for whether it is complete)."""
    f = factorise(n)
    return f.primes if f.complete else dict(sorted({**f.primes, f.cofactor: 1}.items()))


@dataclass(frozen=True)
class DivisorListing:
    """The smallest divisors of ``n`` in increasing order and what the listing proves.

    ``complete``: every divisor is listed. Otherwise every divisor of ``n`` below ``exact_below`` is listed (the
    values above it are divisors too, but some between may be missing).
    """

    n: int
    values: tuple[int, ...]
    complete: bool
    exact_below: int
    factorisation: Factorisation


def list_divisors(n: int, limit: int = MAX_LISTED_DIVISORS) -> DivisorListing:
    """At most ``limit`` divisors of ``n``, the smallest first, generated lazily (never the full list)."""
    f = factorise(n)
    bases = [(p, e) for p, e in f.primes.items()] + ([(f.cofactor, 1)] if not f.complete else [])
    # each divisor is an exponent vector; a successor raises the exponent at index >= the last one raised, so
    # each divisor is generated exactly once
    heap: list[tuple[int, int, tuple[int, ...]]] = [(1, 0, (0,) * len(bases))]
    values: list[int] = []
    while heap and len(values) < limit:
        d, start, exps = heapq.heappop(heap)
        values.append(d)
        for i in range(start, len(bases)):
            p, e = bases[i]
            if exps[i] < e:
                heapq.heappush(heap, (d * p, i, (*exps[:i], exps[i] + 1, *exps[i + 1 :])))
    truncated = bool(heap)
    exact_below = heap[0][0] if truncated else n + 1  # the smallest divisor not listed
    if not f.complete:  # unknown divisors are multiples of a prime factor of the cofactor, all > 2**16
        exact_below = min(exact_below, TRIAL_DIVISION_LIMIT + 1)
    complete = f.complete and not truncated
    return DivisorListing(n, tuple(values), complete, exact_below, f)


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n`` in increasing order; for ``n`` whose divisors are not all known within the
    bounds, the listed ones (see :func:`list_divisors`)."""
    return list(list_divisors(n).values)


def divisors_text(n: int, shown: int = 32) -> str:
    """The divisors of ``n`` for a message, smallest first: all of them when there are at most ``shown``, else the
    first ``shown`` and how many there are (bounded work: :func:`list_divisors`, never a loop up to ``n``; issue
    33: a 30-digit count of heads or experts in a refusal tried every integer up to it)."""
    listing = list_divisors(n, shown + 1)
    text = ", ".join(map(str, listing.values[:shown]))
    if len(listing.values) > shown:
        count = listing.factorisation.divisor_count
        text += f", ... ({count:,} in all)" if count is not None else ", ..."
    return text


def nearest_divisors(n: int, target: int, count: int = 2, max_steps: int = NEAREST_SEARCH_STEPS) -> list[int]:
    """The ``count`` divisors of ``n`` closest to ``target`` (excluding it), searching outward from ``target``.

    At equal distance the smaller one comes first. The search tries at most ``max_steps`` values on each side, so
    it stays fast for any ``n``; 1 and ``n`` always divide ``n`` and fill in if the window finds too few.
    """
    found: list[int] = []
    for step in range(1, max_steps + 1):
        for h in (target - step, target + step):
            if 1 <= h <= n and n % h == 0:
                found.append(h)
        if len(found) >= count or (target - step < 1 and target + step > n):
            break
    for fallback in (1, n):
        if len(found) < count and fallback != target and fallback not in found:
            found.append(fallback)
    return found[:count]


def nearest_valid_heads(embed_dim: int, num_heads: int, count: int = 2) -> list[int]:
    """The ``count`` head counts that divide ``embed_dim`` closest to ``num_heads`` (ties: larger head_dim first)."""
    return nearest_divisors(embed_dim, num_heads, count)


def nearest_divisible(value: int, divisor: int) -> tuple[int, int]:
    """The multiples of ``divisor`` just below and just above ``value`` (below is omitted as 0 if none > 0)."""
    below = value - value % divisor
    above = below + divisor
    return below, above
