"""Session-wide set-up for every test: a module-signing key of the session's own, never the user's.

Saving a module signs it with the key at $VTAKIT_KEY_FILE (compiler/module/signing.py), created on
first use.  The controlling process points that at a fresh temporary folder before pytest-xdist
starts its workers, which inherit the variable: every worker (and every `vtakit` subprocess a test
starts) signs and verifies with one key, and the real ~/.config/vtakit is never touched.  The same folder
holds the compile cache's, which is off unless a test turns it on.
"""

from __future__ import annotations

import os
import shutil
import tempfile

_KEY_DIR_ENV = "VTAKIT_TEST_KEY_DIR"


def pytest_configure(config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a worker: the controller's key file came with the environment
    folder = tempfile.mkdtemp(prefix="vtakit-test-key-")
    os.environ[_KEY_DIR_ENV] = folder
    os.environ["VTAKIT_KEY_FILE"] = os.path.join(folder, "module.key")
    # The compile cache (compiler/cache.py) is off in tests: a test that patches the compiler must see its
    # patch run, and nothing is written under the user's home; cache tests turn it on in their own folder.
    os.environ["VTAKIT_COMPILE_CACHE"] = "off"  # VTAKIT_CACHE is the RTL build cache (hw/build.py)
    os.environ["VTAKIT_CACHE_DIR"] = os.path.join(folder, "compile-cache")
    # Host kernels compile in each test process as before (backends/cpu/objcache.py); the tests of the
    # on-disk kernel cache set VTAKIT_KERNEL_CACHE to a folder of their own.
    os.environ["VTAKIT_KERNEL_CACHE"] = "off"


def pytest_unconfigure(config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    folder = os.environ.pop(_KEY_DIR_ENV, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
