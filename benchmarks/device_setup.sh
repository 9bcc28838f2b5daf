#!/usr/bin/env bash
# Source at the start of a GPU-machine command: installs this checkout (editable, no deps: the
# machine has torch, triton and the rest) so `import gemmforge` works, and carried wheels if any.
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/gf_install.log 2>&1 \
  || { echo "pip install -e . failed:"; tail -5 /tmp/gf_install.log; }
python3 -c "import gemmforge.search.measure.env" || echo "gemmforge does not import"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
