from five_actors.supervisor.progress import ProgressLine, table


def _view(steps: int) -> dict:
    actor = {
        "path": "/root/learner",
        "state": "running",
        "restarts": 0,
        "in_per_s": 1.0,
        "status": {"progress": {"steps": steps, "arch": "3cfd47f602a960b6"}},
    }
    return {"actors": [actor]}


def test_progress_counters_ignore_labels_such_as_the_architecture() -> None:
    line = ProgressLine()
    line(_view(10), 1.0)
    text = line(_view(30), 2.0)
    assert "steps/s" in text and "arch" not in text


def _node(name: str, reason: str | None, gpus: list | None = None) -> dict:
    return {"node": name, "pid": 1, "host": "h", "links": [], "gpus": gpus or [], "gpus_reason": reason}


def test_health_table_says_a_reason_shared_by_every_node_once() -> None:
    shared = table(
        {
            "actors": [],
            "nodes": [_node("head", "no GPU (NVML not found)"), _node("head.root.x", "no GPU (NVML not found)")],
        }
    )
    assert shared.count("no GPU (NVML not found)") == 1
    gpu = {"index": 0, "utilization_pct": 50, "memory_used_bytes": 2**30}
    mixed = table({"actors": [], "nodes": [_node("head", "no GPU (NVML not found)"), _node("gpu-host", None, [gpu])]})
    assert "head (pid 1, h): links: none; gpus: no GPU (NVML not found)" in mixed and "gpu0 50% 1.0 GiB" in mixed
