"""Render the field constants block of ``src/field/fields.cuh`` from ``kernels/constants.py``.

Why generated: the CUDA header must carry the moduli and Montgomery constants as literals (NVRTC
has no Python to ask), but ``kernels/constants.py`` is the single source of truth. The header
keeps the rendered block between two marker lines;
``tests/kernels/test_cuda_fields_host.py`` renders it
again and compares, so the two can never drift. Run ``python -m provetop.kernels.cuda.fields_gen``
to
rewrite the block after a constants change.
"""

from __future__ import annotations

from provetop.kernels import constants as C
from provetop.kernels.cuda.sources import SRC_DIR

BEGIN = (
    "// BEGIN GENERATED CONSTANTS (python -m provetop.kernels.cuda.fields_gen); do not edit by hand"
)
END = "// END GENERATED CONSTANTS"
HEADER = SRC_DIR / "field" / "fields.cuh"


def words32(x: int, n: int) -> list[int]:
    """Little-endian 32-bit words of x (the GPU's view of the limb layout)."""
    if x < 0 or x >> (32 * n):
        raise ValueError(f"{x:#x} does not fit in {n} words")
    return [(x >> (32 * i)) & 0xFFFFFFFF for i in range(n)]


def _words_macro(name: str, x: int, n: int) -> str:
    body = ", ".join(f"0x{w:08x}u" for w in words32(x, n))
    return f"#define {name} {body}"


def render() -> str:
    """The exact text between (and including) the BEGIN and END marker lines."""
    lines = [BEGIN]
    for tag, m, bits, radix_bits in (
        ("FR", C.FR_MODULUS, C.FR_BITS, C.FR_MONT_RADIX_BITS),
        ("FP", C.FP_MODULUS, C.FP_BITS, C.FP_MONT_RADIX_BITS),
    ):
        n = radix_bits // 32
        m0 = (-pow(m, -1, 1 << 32)) % (1 << 32)
        lines += [
            f"// {tag}: m = {m:#x} ({bits} bits), {n} words, R = 2^{radix_bits}",
            f"#define {tag}_WORDS {n}",
            _words_macro(f"{tag}_MOD_WORDS", m, n),
            "// -m^-1 mod 2^32",
            f"#define {tag}_M0 0x{m0:08x}u",
            f"// R^2 mod m = 2^{2 * radix_bits} mod m",
            _words_macro(f"{tag}_R2_WORDS", pow(2, 2 * radix_bits, m), n),
            f"// R mod m = 2^{radix_bits} mod m: the Montgomery form of 1",
            _words_macro(f"{tag}_ONE_WORDS", pow(2, radix_bits, m), n),
        ]
    lines.append(END)
    return "\n".join(lines)


def current_block(text: str) -> str:
    """The block as it stands in a header's text (markers included)."""
    start = text.index(BEGIN)
    end = text.index(END, start) + len(END)
    return text[start:end]


def main() -> None:
    """Rewrite the generated block of fields.cuh in place."""
    text = HEADER.read_text()
    HEADER.write_text(text.replace(current_block(text), render()))


if __name__ == "__main__":
    main()
