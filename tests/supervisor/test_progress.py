from five_actors.supervisor.progress import ProgressLine


def _view(steps: int) -> dict:
    actor = {"path": "/root/learner", "state": "running", "restarts": 0, "in_per_s": 1.0,
             "status": {"progress": {"steps": steps, "arch": "3cfd47f602a960b6"}}}  # fmt: skip
    return {"actors": [actor]}


def test_progress_counters_ignore_labels_such_as_the_architecture() -> None:
    line = ProgressLine()
    line(_view(10), 1.0)
    text = line(_view(30), 2.0)
    assert "steps/s" in text and "arch" not in text
