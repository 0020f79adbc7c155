"""Exact Fr and Fp arithmetic on canonical Python ints.

Why plain ints: this is the reference the GPU kernels are checked against, so it favours
obvious correctness (every result reduced into [0, m)) over speed; the hot loops elsewhere
(NTT, MSM) inline the same operations. Montgomery form exists only at the array boundary
(``kernels/layout.py``) and in :meth:`PrimeField.to_montgomery` for tests.
"""

from __future__ import annotations

from collections.abc import Sequence

from provetop.kernels.constants import FP_MODULUS, FR_MODULUS


class PrimeField:
    """Arithmetic modulo a prime ``modulus`` with Montgomery radix ``2^radix_bits``.

    All inputs are ints (reduced on the way in where an operation needs it), all outputs are
    canonical ints in [0, modulus)."""

    def __init__(self, name: str, modulus: int, radix_bits: int) -> None:
        self.name = name
        self.modulus = modulus
        self.radix_bits = radix_bits
        self.mont_r = pow(2, radix_bits, modulus)
        self.mont_r_inv = pow(2, -radix_bits, modulus)

    def __repr__(self) -> str:
        return f"PrimeField({self.name})"

    # --- basic operations ------------------------------------------------------------------

    def add(self, a: int, b: int) -> int:
        return (a + b) % self.modulus

    def sub(self, a: int, b: int) -> int:
        return (a - b) % self.modulus

    def neg(self, a: int) -> int:
        return -a % self.modulus

    def mul(self, a: int, b: int) -> int:
        return a * b % self.modulus

    def square(self, a: int) -> int:
        return a * a % self.modulus

    def pow(self, a: int, e: int) -> int:
        """a^e; negative e means (a^-1)^|e| (ZeroDivisionError for a = 0)."""
        if e < 0:
            return pow(self.inv(a), -e, self.modulus)
        return pow(a, e, self.modulus)

    def inv(self, a: int) -> int:
        """a^-1 mod m. Raises ZeroDivisionError for a = 0 (mod m): no field element inverts it."""
        a %= self.modulus
        if a == 0:
            raise ZeroDivisionError(f"inverse of zero in {self.name}")
        return pow(a, -1, self.modulus)

    def batch_inverse(self, values: Sequence[int]) -> list[int]:
        """Inverses of all ``values`` with one field inversion (Montgomery's trick: prefix
        products forward, one inverse, walk back). Raises ZeroDivisionError on any zero."""
        m = self.modulus
        n = len(values)
        if n == 0:
            return []
        prefix = [0] * n
        acc = 1
        for i, v in enumerate(values):
            v %= m
            if v == 0:
                raise ZeroDivisionError(f"batch inverse of zero in {self.name} (index {i})")
            prefix[i] = acc
            acc = acc * v % m
        inv = pow(acc, -1, m)
        out = [0] * n
        for i in range(n - 1, -1, -1):
            out[i] = inv * prefix[i] % m
            inv = inv * values[i] % m
        return out

    def is_square(self, a: int) -> bool:
        """Euler's criterion (0 counts as a square)."""
        a %= self.modulus
        return a == 0 or pow(a, (self.modulus - 1) // 2, self.modulus) == 1

    def sqrt(self, a: int) -> int | None:
        """A square root of a, or None if a is not a square. For p = 3 mod 4 (Fp) this is
        a^((p+1)/4); otherwise (Fr, 2-adicity 32) Tonelli-Shanks. Which of the two roots comes
        back is unspecified; callers that care (point decompression) pick by sign."""
        m = self.modulus
        a %= m
        if a == 0:
            return 0
        if not self.is_square(a):
            return None
        if m % 4 == 3:
            return pow(a, (m + 1) // 4, m)
        # Tonelli-Shanks
        q, s = m - 1, 0
        while q % 2 == 0:
            q //= 2
            s += 1
        z = 2
        while self.is_square(z):
            z += 1
        c = pow(z, q, m)
        x = pow(a, (q + 1) // 2, m)
        t = pow(a, q, m)
        while t != 1:
            i, t2 = 0, t
            while t2 != 1:
                t2 = t2 * t2 % m
                i += 1
            b = pow(c, 1 << (s - i - 1), m)
            x = x * b % m
            c = b * b % m
            t = t * c % m
            s = i
        return x

    # --- Montgomery form ------------------------------------------------------------------

    def to_montgomery(self, a: int) -> int:
        """a -> a * 2^radix_bits mod m (what the limb arrays hold)."""
        return a * self.mont_r % self.modulus

    def from_montgomery(self, a: int) -> int:
        """a * 2^radix_bits -> a."""
        return a * self.mont_r_inv % self.modulus

    def montgomery_mul(self, a_mont: int, b_mont: int) -> int:
        """REDC(a_mont * b_mont): the product as a Montgomery kernel computes it, for tests."""
        return a_mont * b_mont * self.mont_r_inv % self.modulus


FR = PrimeField("Fr", FR_MODULUS, 256)
FP = PrimeField("Fp", FP_MODULUS, 384)

# Module-level shortcuts, so callers can write fields.fr_mul(a, b).
fr_add, fr_sub, fr_neg, fr_mul, fr_square = FR.add, FR.sub, FR.neg, FR.mul, FR.square
fr_inv, fr_pow, fr_batch_inverse, fr_sqrt = FR.inv, FR.pow, FR.batch_inverse, FR.sqrt
fr_to_montgomery, fr_from_montgomery = FR.to_montgomery, FR.from_montgomery
fp_add, fp_sub, fp_neg, fp_mul, fp_square = FP.add, FP.sub, FP.neg, FP.mul, FP.square
fp_inv, fp_pow, fp_batch_inverse, fp_sqrt = FP.inv, FP.pow, FP.batch_inverse, FP.sqrt
fp_to_montgomery, fp_from_montgomery = FP.to_montgomery, FP.from_montgomery
