"""ir.capabilities: the table loads its backends once, and a lookup that races the first
load waits for it instead of finding the table empty (builder threads look up at once)."""
import threading
import time
from types import SimpleNamespace

from gemmforge.ir.capabilities import CapabilityTable


def test_concurrent_first_lookups_wait_for_the_load():
    table = CapabilityTable()
    calls = []

    def slow_loader():
        calls.append(1)
        time.sleep(0.2)          # a backend import in progress
        table.get("inner")       # a lookup from inside the load returns at once (re-entrant)
        table.add(SimpleNamespace(name="wgmma"))

    table.on_first_use(slow_loader)
    table.add(SimpleNamespace(name="inner"))
    found, errors = [], []

    def look():
        try:
            found.append(table.get("wgmma").name)
        except KeyError as e:
            errors.append(str(e))
    threads = [threading.Thread(target=look) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and found == ["wgmma"] * 8
    assert calls == [1]          # the loader ran once
