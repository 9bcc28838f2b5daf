"""A small shipped file for tests of the resolver's rules (search.choice, waves, ranker)."""
from __future__ import annotations

from gemmforge.search.ship import ship

H100 = "NVIDIA H100 80GB HBM3"
CLASSES = {H100: "h100", "NVIDIA H200": "h200"}
HEADER = "m,n,k,layout,acc,device,backend,program,status,kernel_us,cublas_us,speedup,rel_err\n"


def shipped_file(tmp_path, rows, layouts=("nn",), device=H100):
    """A shipped file of `device`'s rows (m, n, k, program, kernel_us; an H100's or an
    H200's), each row in every one of `layouts`, built by ship()."""
    lines = [f"{m},{n},{k},{lay},f32,{device},{prog.split()[0]},{prog},ok,{us},{us},1.0,2e-4\n"
             for lay in layouts for m, n, k, prog, us in rows]
    source = tmp_path / "rows.csv"
    source.write_text(HEADER + "".join(lines))
    out = tmp_path / "shipped.json"
    ship([source], out, "test: measured", CLASSES[device])
    return out
