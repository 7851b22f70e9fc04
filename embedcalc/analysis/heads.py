"""Head-shape arithmetic: which ``num_heads`` divide an ``embed_dim``, and the nearest valid alternatives."""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

# head_dim values of published models (BERT, GPT-2/3, LLaMA: 64 or 128); `embedcalc heads` marks them.
USUAL_HEAD_DIMS = (64, 128)
# FlashAttention-2 supports head dimensions up to 256 (Dao 2023, README "head dimensions up to 256").
FLASH_ATTENTION_MAX_HEAD_DIM = 256


def _is_probable_prime(n: int) -> bool:
    """Miller-Rabin with the first 12 prime bases: deterministic for n < 3.3e24, overwhelmingly right beyond."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    for p in small:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in small:
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


def _pollard_rho(n: int) -> int:
    """A non-trivial factor of the odd composite ``n`` (Brent's variant of Pollard's rho)."""
    for c in range(1, n):
        y, m, g, r, q = 2, 128, 1, 1, 1
        x = ys = y
        while g == 1:
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
            r *= 2
        if g == n:
            g = 1
            while g == 1:
                ys = (ys * ys + c) % n
                g = gcd(abs(x - ys), n)
        if g != n:
            return g
    raise ArithmeticError(f"no factor found for {n}")  # pragma: no cover - unreachable for composite n


def prime_factors(n: int) -> dict[int, int]:
    """Prime factorisation {p: exponent} of ``n`` >= 1: trial division by small primes, then Pollard's rho."""
    out: dict[int, int] = {}
    for p in (2, 3, 5, 7, 11, 13):
        while n % p == 0:
            out[p] = out.get(p, 0) + 1
            n //= p
    stack = [n] if n > 1 else []
    while stack:
        m = stack.pop()
        if _is_probable_prime(m):
            out[m] = out.get(m, 0) + 1
            continue
        f = _pollard_rho(m)
        stack += [f, m // f]
    return dict(sorted(out.items()))


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n`` in increasing order, from its factorisation (fast for any size model)."""
    out = [1]
    for p, e in prime_factors(n).items():
        out = [d * p**k for d in out for k in range(e + 1)]
    return sorted(out)


def nearest_divisors(n: int, target: int, count: int = 2, max_steps: int = 1_000_000) -> list[int]:
    """The ``count`` divisors of ``n`` closest to ``target`` (excluding it), searching outward from ``target``.

    At equal distance the smaller one comes first. The search is bounded, so it stays fast for any ``n``
    (10**18 included); 1 and ``n`` always divide ``n`` and fill in if the window finds too few.
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


@dataclass(frozen=True)
class HeadChoice:
    """One way to split ``embed_dim`` into heads."""

    num_heads: int
    head_dim: int
    multiple_of_8: bool
    multiple_of_16: bool
    multiple_of_64: bool
    flash_ok: bool
    usual: bool


def head_choices(embed_dim: int) -> list[HeadChoice]:
    """Every valid ``num_heads`` for ``embed_dim`` with its ``head_dim`` and alignment facts."""
    out = []
    for h in divisors(embed_dim):
        hd = embed_dim // h
        out.append(
            HeadChoice(
                num_heads=h,
                head_dim=hd,
                multiple_of_8=hd % 8 == 0,
                multiple_of_16=hd % 16 == 0,
                multiple_of_64=hd % 64 == 0,
                flash_ok=hd <= FLASH_ATTENTION_MAX_HEAD_DIM,
                usual=hd in USUAL_HEAD_DIMS,
            )
        )
    return out
