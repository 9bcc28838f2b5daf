"""A small shipped file for tests of the resolver's rules (dispatch.choice, waves, ranker)."""
from __future__ import annotations

from gemmforge.dispatch.devices import device_class
from gemmforge.search.campaign.ship import ship

H100 = "NVIDIA H100 80GB HBM3"
HEADER = "m,n,k,layout,acc,device,backend,program,status,kernel_us,cublas_us,speedup,rel_err\n"


def shipped_file(tmp_path, rows, layouts=("nn",), device=H100):
    """A shipped file of `device`'s rows (m, n, k, program, kernel_us), each row in every one
    of `layouts`, built by ship(); called again in `tmp_path`, it adds to the same file (a
    second device class's rows beside the first's)."""
    lines = [f"{m},{n},{k},{lay},f32,{device},{prog.split()[0]},{prog},ok,{us},{us},1.0,2e-4\n"
             for lay in layouts for m, n, k, prog, us in rows]
    source = tmp_path / "rows.csv"
    source.write_text(HEADER + "".join(lines))
    out = tmp_path / "shipped.json"
    ship([source], out, "test: measured", device_class(device))
    return out
