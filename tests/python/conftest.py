"""Fixtures of the Python module's tests: a small ImageFolder written by feed_reference (PINFEED_FEED_REFERENCE,
which tests/CMakeLists.txt sets), and pytest's exit status 77 (ctest: skipped) when every test skipped itself."""
import os
import shutil
import subprocess

import pytest

CLASSES, PER_CLASS, SIDE = 3, 8, 48


def reference_exe():
    exe = os.environ.get("PINFEED_FEED_REFERENCE")
    if not exe:
        pytest.skip("PINFEED_FEED_REFERENCE is not set (tests/CMakeLists.txt sets it)")
    return exe


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """ROOT with train/ (3 classes x 8 JPEGs of 48 x 48) and val/."""
    root = tmp_path_factory.mktemp("folder")
    subprocess.run([reference_exe(), "gen", str(root), str(CLASSES), str(PER_CLASS), str(SIDE)], check=True)
    return root


@pytest.fixture
def copy_of(tmp_path, dataset):
    """A fresh copy of the train split, for a test that damages files."""
    def make():
        dst = tmp_path / "train"
        shutil.copytree(dataset / "train", dst)
        return dst
    return make


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter else {}
    if exitstatus == 0 and stats.get("skipped") and not stats.get("passed"):
        session.exitstatus = 77
