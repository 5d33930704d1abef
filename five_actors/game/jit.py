"""`kernel`: numba.njit with an on-disk cache that notices a change to any game kernel file.

numba checks only the source file of the function it loads from its cache, but the game's
kernels call each other across sim.py, step.py and observe.py and compile state.py's column
constants into their code: after a change to one of those files (an edit, a merge, an
upgrade), the others' cached machine code would be stale and silently wrong. Here every
cache entry of a function defined in this package is stamped with a hash of all the kernel
files instead, so any change recompiles them all. Elsewhere numba caches as usual.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from numba import njit
from numba.core import caching

_HERE = Path(__file__).resolve().parent
KERNEL_FILES = ("state.py", "sim.py", "step.py", "observe.py", "bots.py")
"""The files whose code or constants end up inside compiled kernels."""


def kernel_stamp() -> bytes:
    """A hash of every kernel file: the cache stamp of every kernel."""
    digest = hashlib.sha256()
    for name in KERNEL_FILES:
        digest.update((_HERE / name).read_bytes())
    return digest.digest()


class _GameStamp:
    """Locator mixin: only for functions defined in this package, stamped by all kernel files."""

    def get_source_stamp(self) -> bytes:
        return kernel_stamp()

    @classmethod
    def from_function(cls, py_func: Callable[..., Any], py_file: str) -> Any:
        if Path(py_file).resolve().parent != _HERE:
            return None
        return super().from_function(py_func, py_file)  # type: ignore[misc]


class _GameUserDirLocator(_GameStamp, caching.UserProvidedCacheLocator):
    """The cache under NUMBA_CACHE_DIR when that is set."""


class _GameInTreeLocator(_GameStamp, caching.InTreeCacheLocator):
    """The cache in this package's __pycache__ otherwise."""


def _install() -> None:
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl")  # renamed in numba 0.61
    locators = impl._locator_classes
    for locator in (_GameInTreeLocator, _GameUserDirLocator):
        if locator not in locators:
            locators.insert(0, locator)


def kernel(fn: Callable[..., Any] | None = None, *, parallel: bool = False) -> Any:
    """`@kernel` or `@kernel(parallel=True)`: numba.njit(cache=True) with the whole-package stamp."""
    _install()
    jit = njit(cache=True, parallel=parallel)
    return jit(fn) if fn is not None else jit
