"""Values derived from a module's tensors, kept on the module until one of those tensors changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from torch import Tensor, nn

T = TypeVar("T")


def kept(module: nn.Module, sources: tuple[Tensor, ...], make: Callable[[], T], tag: Any = None) -> T:
    """`make()`, made again only when one of `sources` was written since (an optimiser step or a loaded checkpoint
    writes a parameter in place, which bumps its version; moving or replacing it gives another tensor) or `tag` differs.
    A module keeps one such value."""
    try:
        key = (tag, *[(id(t), t.data_ptr(), t._version) for t in sources])
    except RuntimeError:  # an inference-mode tensor counts no versions: nothing would tell that it changed
        return make()
    entry = module.__dict__.get("_kept")
    if entry is None or entry[0] != key:
        # The entry holds its sources, so no other tensor can take their ids while it stands.
        entry = (key, sources, make())
        module.__dict__["_kept"] = entry
    return entry[2]
