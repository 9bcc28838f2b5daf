"""cuda_wgmma's FastDiv (templates/fastdiv.cuh.jinja): the host-built multiplier gives the exact
quotient for every dividend the kernels pass it (0 <= n < 2^31), checked by building the
template's own code with nvcc and running it on the host over edge and random cases, and by
the same arithmetic in Python over many more."""
from __future__ import annotations

import random
import subprocess

import pytest

from gemmforge.backends.cuda_wgmma.backend import TEMPLATES
from gemmforge.backends.templating import render
from gemmforge.compiler import nvcc

LIMIT = 1 << 31

CHECK_MAIN = r"""
#include <cstdint>
#include <cstdio>
{{ fastdiv }}
// Every divisor in 1..4096, then the big ones listed; dividends: each edge near a multiple
// of d, and a fixed pseudo-random sweep up to 2^31 - 1.
int main() {
  const uint32_t big[] = {4097u, 65535u, 65536u, 65537u, 1000003u, 1u << 30, (1u << 30) + 1u,
                          2147483647u};
  long long checks = 0, wrong = 0;
  uint64_t state = 12345;
  auto check = [&](const FastDiv& f, long long n) {
    if (n < 0 || n >= (1ll << 31)) return;
    ++checks;
    if (f.div(static_cast<int>(n)) != static_cast<int>(n / f.d)) ++wrong;
  };
  for (int i = 0; i < 4096 + 8; ++i) {
    const uint32_t d = i < 4096 ? i + 1 : big[i - 4096];
    FastDiv f;
    f.set(d);
    for (long long q : {0ll, 1ll, 2ll, 1000ll, (1ll << 31) / d - 1, (1ll << 31) / d})
      for (long long e : {-1ll, 0ll, 1ll}) check(f, q * d + e);
    for (int j = 0; j < 200; ++j) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      check(f, static_cast<long long>(state >> 33));  // 31 random bits
    }
  }
  std::printf("checks=%lld wrong=%lld\n", checks, wrong);
  return wrong != 0;
}
"""


def multiplier(d: int) -> tuple[int, int]:
    """FastDiv::set's arithmetic: (mul, shift)."""
    shift = (d - 1).bit_length()
    return ((1 << 32) * ((1 << shift) - d)) // d + 1, shift


def quotient(n: int, mul: int, shift: int) -> int:
    """FastDiv::div's arithmetic on 32-bit unsigned values."""
    hi = (n * mul) >> 32
    assert hi + n < 1 << 32  # the sum the kernel forms in 32 bits
    return (hi + n) >> shift


def test_multiplier_fits_32_bits_and_quotients_are_exact():
    rng = random.Random(36)
    divisors = list(range(1, 3000)) + [rng.randrange(1, LIMIT) for _ in range(2000)] + [LIMIT - 1]
    checked = 0
    for d in divisors:
        mul, shift = multiplier(d)
        assert 0 < mul < 1 << 32
        edges = [q * d + e for q in (0, 1, 7, (LIMIT - 1) // d) for e in (-1, 0, 1)]
        for n in edges + [rng.randrange(LIMIT) for _ in range(50)]:
            if 0 <= n < LIMIT:
                assert quotient(n, mul, shift) == n // d, (d, n)
                checked += 1
    assert checked > 100_000


@pytest.mark.nvcc
def test_template_fastdiv_built_by_nvcc_is_exact(tmp_path):
    fastdiv = render(TEMPLATES, "fastdiv.cuh.jinja", {})
    src = tmp_path / "fastdiv_check.cu"
    src.write_text(CHECK_MAIN.replace("{{ fastdiv }}", fastdiv))
    exe = tmp_path / "fastdiv_check"
    built = subprocess.run([nvcc.knobs().nvcc, "-std=c++17", "-o", str(exe), str(src)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    checks, wrong = (int(part.split("=")[1]) for part in ran.stdout.split())
    assert checks > 800_000 and wrong == 0, ran.stdout
    assert ran.returncode == 0
