"""Pieces both CuTe DSL kernels share: operand views from raw pointers, and the tile order.

Plain functions called while a kernel is traced: their `if`s are Python decisions on the
plan, and their arithmetic on DSL integers emits code.

Imported only inside the AOT build process, after CUTE_DSL_ARCH is set (see aot.py).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute


def operand_views(plan, a, b, c, m, n, k):
    """A as (m, k), B as (n, k), C as (m, n): CuTe's GEMM convention over row-major data.

    A and C are row-major (K-major A). B is K-major for layout nt (stored n x k) and
    N-major for nn (stored k x n). `plan.align` tells the compiler how far row starts
    are aligned, so global copies vectorise.
    """
    ks = cute.assume(k, divby=plan.align)
    ns = cute.assume(n, divby=plan.align)
    mA = cute.make_tensor(a, cute.make_layout((m, k), stride=(ks, 1)))
    if plan.b_k_major:
        mB = cute.make_tensor(b, cute.make_layout((n, k), stride=(ks, 1)))
    else:
        mB = cute.make_tensor(b, cute.make_layout((n, k), stride=(1, ns)))
    mC = cute.make_tensor(c, cute.make_layout((m, n), stride=(ns, 1)))
    return mA, mB, mC


def tile_coords(idx, tiles_m, tiles_n, group: int, column_order: bool):
    """The (m, n) tile that the idx-th unit of work owns, in grouped raster order.

    Row order walks bands of `group` tile-rows, column by column inside a band, so a
    band's B tiles stay in L2 while its A rows are reused; column order swaps M and N.
    """
    major, minor = (tiles_n, tiles_m) if column_order else (tiles_m, tiles_n)
    band_size = minor * group
    band = idx // band_size
    first = band * group
    rows = cutlass.min(major - first, group)
    within = idx % band_size
    a = first + within % rows
    b = within // rows
    if column_order:
        return b, a
    return a, b
