"""gemmforge.backends.triton.descriptors's CUtensorMap reuse: Triton's per-launch descriptor
encoding, memoised on everything it reads, gives the same arguments and encodes once per
buffer."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("triton")

from gemmforge.backends.triton import descriptors  # noqa: E402


class Counting:
    """A stand-in for Triton's make_tensordesc_arg: counts encodings, returns what it read."""

    def __init__(self):
        self.calls = 0

    def __call__(self, arg, metadata, *rest):
        self.calls += 1
        return [("map", arg.base.data_ptr(), tuple(arg.shape)), *arg.shape, *arg.strides]


def descriptor(ptr: int, rows: int = 256, cols: int = 64, padding: str = "zero"):
    base = descriptors.DevicePointer(ptr, None)
    return SimpleNamespace(base=base, shape=[rows, cols], strides=[cols, 1],
                           block_shape=[128, 64], padding=padding, round_f32_to_tf32=False)


def test_encodes_once_per_buffer_and_returns_what_the_encoder_did():
    encode = Counting()
    cached = descriptors._cached_encoding(encode)
    meta = {"swizzle": 3, "block_size": [128, 64]}
    first = cached(descriptor(0x1000), meta, None)
    again = cached(descriptor(0x1000), meta, None)
    assert first == again == encode(descriptor(0x1000), meta) and encode.calls == 2
    assert first is not again                       # a fresh list for the caller each time
    cached(descriptor(0x2000), meta, None)          # another buffer
    cached(descriptor(0x1000, rows=128), meta, None)  # another shape
    cached(descriptor(0x1000, padding="nan"), meta, None)
    cached(descriptor(0x1000), {"swizzle": 3, "block_size": [128, 64]}, None)  # other kernel
    assert encode.calls == 2 + 4


def test_no_metadata_is_passed_through_uncached():
    encode = Counting()
    cached = descriptors._cached_encoding(encode)
    for _ in range(3):
        cached(descriptor(0x1000), None)
    assert encode.calls == 3


def test_the_cache_is_bounded():
    encode = Counting()
    cached = descriptors._cached_encoding(encode, size=4)
    meta = {}
    for ptr in range(10):
        cached(descriptor(0x1000 * (ptr + 1)), meta, None)
    cached(descriptor(0x1000), meta, None)  # evicted: encoded again
    assert encode.calls == 11


def test_installs_once_into_the_triton_that_builds_launchers_this_way(monkeypatch):
    nvidia = pytest.importorskip("triton.backends.nvidia.driver")
    original = getattr(nvidia, "make_tensordesc_arg", None)
    wrap = getattr(getattr(nvidia, "wrap_handle_tensordesc", None), "__code__", None)
    if original is None or wrap is None or "make_tensordesc_arg" not in wrap.co_names:
        assert descriptors.install_descriptor_cache() is False
        return
    monkeypatch.setattr(nvidia, "make_tensordesc_arg", original)  # restored afterwards
    assert descriptors.install_descriptor_cache() is True
    patched = nvidia.make_tensordesc_arg
    assert patched is not original and patched.gemmforge_cached
    assert descriptors.install_descriptor_cache() is True and nvidia.make_tensordesc_arg is patched
