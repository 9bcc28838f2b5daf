"""Run one GEMM a fixed number of times: a gemmforge program or cuBLAS, for a profiler
(ncu, nsys) to wrap. The GEMM's launches come first (after the two randn kernels that
draw the operands), then one check of the result against torch.matmul.

    python3 benchmarks/run_gemm.py --shape 2048x4096x8192 [--program "cute_cpp ..."] [--calls 10]

Without --program it runs torch.matmul (cuBLAS NN). Artifacts come from the usual cache
(GEMMFORGE_CACHE_DIR), built there if missing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

import torch  # noqa: E402

from gemmforge.ir import parse, parse_problem  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", required=True, help="MxNxK")
    ap.add_argument("--program", help="program text (default: cuBLAS through torch.matmul)")
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    problem = parse_problem(args.shape)
    a = torch.randn(problem.m, problem.k, device="cuda", dtype=torch.float16)
    b = torch.randn(problem.k, problem.n, device="cuda", dtype=torch.float16)
    c = torch.empty(problem.m, problem.n, device="cuda", dtype=torch.float16)
    gemm = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    if args.program:
        from gemmforge.backends.pipeline import compile_and_load
        kernel = compile_and_load(parse(args.program), problem)
        gemm = lambda: kernel(a, b, out=c)  # noqa: E731
    for _ in range(args.calls):
        gemm()
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a @ b, rtol=2e-2, atol=1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
