"""ir.devices: one table of device facts per class; backends declare their MMA family;
Result's per-protocol ratios read through the PROTOCOLS table."""
from __future__ import annotations

import pytest

from gemmforge.backends import registry
from gemmforge.dispatch.devices import MULTIPROCESSORS, SIBLINGS
from gemmforge.ir.arch import LIMITS, MmaFamily, mma_family_on
from gemmforge.ir.devices import A100, DEVICES, H100, H200, for_arch
from gemmforge.ir.program import Arch
from gemmforge.search.measure.records import Result
from gemmforge.search.measure.timing_protocols import PROTOCOLS


def test_every_class_has_its_facts_once():
    assert MULTIPROCESSORS == {name: facts.sms for name, facts in DEVICES.items()}
    for name, facts in DEVICES.items():
        assert facts.name == name
        assert facts.smem_per_sm >= LIMITS[facts.arch].max_smem_per_block
    assert for_arch(Arch.SM90A) is H100 and for_arch(Arch.SM80) is A100


def test_siblings_share_the_die_and_differ_in_memory():
    for cls, siblings in SIBLINGS.items():
        for other in siblings:
            a, b = DEVICES[cls], DEVICES[other]
            assert (a.sms, a.peak_fp16_flops, a.smem_per_sm) == (b.sms, b.peak_fp16_flops,
                                                                  b.smem_per_sm)
    assert H200.hbm_bytes_per_s > H100.hbm_bytes_per_s


def test_every_backend_declares_its_mma_family():
    families = {name: registry.get(name).mma_family for name in registry.names()}
    assert all(isinstance(f, MmaFamily) for f in families.values()), families
    assert families["cuda_wgmma"] == MmaFamily.WGMMA
    assert families["cuda_simt"] == MmaFamily.SIMT


@pytest.mark.parametrize("family", list(MmaFamily))
def test_wgmma_falls_back_to_mma_sync_where_the_arch_lacks_it(family):
    assert mma_family_on(family, Arch.SM90A) == family
    expected = MmaFamily.MMA_SYNC if family == MmaFamily.WGMMA else family
    assert mma_family_on(family, Arch.SM80) == expected


def test_result_ratios_follow_the_protocol_table():
    times = {}
    for i, p in enumerate(PROTOCOLS.values()):
        times[p.field], times[p.cublas_field] = 10.0 + i, 12.0 + 2 * i
    r = Result("cuda_mma sm_80", 64, 64, 64, **times)
    for i, name in enumerate(PROTOCOLS):
        assert r.ratio(name) == pytest.approx((12.0 + 2 * i) / (10.0 + i)), name
    assert r.ratio("kernel") == r.speedup
    assert (r.cold_speedup, r.call_speedup, r.sustained_speedup, r.after_speedup) == \
        (r.ratio("cold"), r.ratio("call"), r.ratio("sustained"), r.ratio("after"))
    assert Result("cuda_mma sm_80", 64, 64, 64, server_us=5.0).ratio("server") is None
    with pytest.raises(KeyError):
        r.ratio("warm")
