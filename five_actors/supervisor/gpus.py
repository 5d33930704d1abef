"""GPU utilisation and memory through NVML (nvidia-ml-py), for /health, /actors and /metrics."""

from __future__ import annotations

from typing import Any

NO_NVML = "no GPU (NVML not found)"
"""The reason a host without the NVML library (no NVIDIA driver) reports for its empty GPU list."""

_nvml_ready: bool | None = None
_nvml_reason = ""


def _init() -> bool:
    global _nvml_ready, _nvml_reason
    if _nvml_ready is None:
        try:
            import pynvml

            pynvml.nvmlInit()
            _nvml_ready = True
        except Exception as exc:  # noqa: BLE001 - no driver, no library, no GPU: all mean "no GPUs here"
            _nvml_ready = False
            # The usual case on a CPU-only host, said plainly; anything else keeps NVML's own words.
            library_missing = type(exc).__name__ == "NVMLError_LibraryNotFound"
            _nvml_reason = NO_NVML if library_missing else f"NVML unavailable: {type(exc).__name__}: {exc}"
    return _nvml_ready


def gpu_info() -> dict[str, Any]:
    """`{"gpus": [{index, name, utilization_pct, memory_used_bytes, memory_total_bytes}], "gpus_reason": str | None}`.

    On a host without NVML or without GPUs the list is empty and the reason says why.
    """
    if not _init():
        return {"gpus": [], "gpus_reason": _nvml_reason}
    import pynvml

    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "utilization_pct": int(util.gpu),
                    "memory_used_bytes": int(memory.used),
                    "memory_total_bytes": int(memory.total),
                }
            )
    except Exception as exc:  # noqa: BLE001 - a GPU that stops answering is reported, not raised
        return {"gpus": [], "gpus_reason": f"NVML query failed: {type(exc).__name__}: {exc}"}
    return {"gpus": gpus, "gpus_reason": None if gpus else "NVML found no GPU"}
