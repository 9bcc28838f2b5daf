"""Test tiers: CPU tests run everywhere; `gpu` tests need CUDA; `nvcc` tests need the toolkit."""
import os
import shutil

import pytest

try:  # property tests run on loaded 2-core CI machines: no per-example deadline
    from hypothesis import settings as _hypothesis_settings
    _hypothesis_settings.register_profile("gemmforge", deadline=None)
    _hypothesis_settings.load_profile("gemmforge")
except ImportError:  # hypothesis is a test extra
    pass


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    no_gpu = pytest.mark.skip(reason="no CUDA GPU here (run the gpu tier on the GPU machine)")
    no_nvcc = pytest.mark.skip(reason="nvcc not found: install the CUDA toolkit or set GEMMFORGE_NVCC")
    has_gpu = _has_cuda()
    has_nvcc = shutil.which(os.environ.get("GEMMFORGE_NVCC", "nvcc")) is not None
    for item in items:
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(no_gpu)
        if "nvcc" in item.keywords and not has_nvcc:
            item.add_marker(no_nvcc)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Each test session builds into its own artifact cache and tunes into its own
    database, never the user's."""
    root = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("GEMMFORGE_CACHE_DIR", str(root / "artifact-cache"))
    monkeypatch.setenv("GEMMFORGE_TUNE_DB", f"sqlite:///{root / 'tuning.db'}")


@pytest.fixture
def null_backend():
    """The null backend registered for one test (gemmforge.backends.null): the compile and
    load path with no toolchain and no GPU. Yields the backend."""
    from gemmforge.backends import registry
    from gemmforge.backends.null import NullBackend
    backend = NullBackend()
    registry.add(backend)
    yield backend
    registry.remove(backend.name)


@pytest.fixture(scope="session")
def full():
    """The package's replay data (search.learn.replay_reward): the LLM tests' measured programs."""
    from gemmforge.search.learn.replay_reward import ReplayReward
    return ReplayReward()


@pytest.fixture(scope="session")
def split(full):
    """Its training and held-out shapes (search.learn.llm_tasks.split_shapes)."""
    from gemmforge.search.learn.llm_tasks import split_shapes
    return split_shapes(full)
