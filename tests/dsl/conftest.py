"""Fixtures of the DSL tests."""
import pytest


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """The on-disk specialization cache on (the session runs with it off), in a directory of
    the test's own: returns its `spec` directory."""
    monkeypatch.setenv("LAYOUTKIT_SPEC_CACHE", "1")
    monkeypatch.setenv("LAYOUTKIT_CACHE_DIR", str(tmp_path))
    return tmp_path / "spec"
