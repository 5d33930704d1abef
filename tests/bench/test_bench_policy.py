"""`five-actors bench policy`: rows/s with the work per row and the FLOP rate beside them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.supervisor.cluster import REPO, cli_json


def test_policy_bench_reports_rows_per_second_and_flops_of_forward_and_update() -> None:
    smoke = ["--set", "model.lstm_size=32", "--set", "model.entity_hidden=16", "--set", "model.core_input=32"]
    args = ["bench", "policy", "--rows", "40", "--chunks", "4", "--seconds", "0.3", *smoke]
    report, _ = cli_json(args, timeout=240)
    assert report["lstm_size"] == 32 and report["forward_rows"] == 40 and report["update_rows"] == 16 * 4
    for part in ("forward", "update"):
        rate, mflop = report[f"{part}_rows_per_s"], report[f"{part}_mflop_per_row"]
        assert rate > 0 and mflop > 0
        assert abs(report[f"{part}_gflop_per_s"] - mflop * rate / 1e3) <= 0.01 + 0.01 * report[f"{part}_gflop_per_s"]
    # An update is a forward over every step plus its backward, about twice the forward's products (no gradient is
    # taken for the observations): near three times acting's work per row, the fused LSTM's products counted too.
    assert report["update_mflop_per_row"] > 2.7 * report["forward_mflop_per_row"]


def test_the_system_bench_ideal_is_what_every_core_would_train_at_the_policy_rates() -> None:
    from five_actors.bench.system import ideal
    from five_actors.config import load_config

    rates = ideal(load_config("smoke"), 2.0, seconds=0.2)
    forward, update = rates["policy_forward_rows_per_s"], rates["policy_update_rows_per_s"]
    assert forward > update > 0  # an update row is a forward, a backward and Adam
    # Each fresh sample: one forward and two update passes; every core on nothing else; learner samples count reuse.
    expected = 2.0 * (os.cpu_count() or 1) / (1 / forward + 2.0 / update)
    assert abs(rates["ideal_samples_per_s"] - expected) <= 0.1
    assert ideal(load_config("smoke"), None, seconds=0.05)["ideal_samples_per_s"] is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("bench", ["policy", "system"])
def test_a_gpu_bench_on_a_machine_without_one_says_so(bench: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "five_actors", "bench", bench, "--set", "model.device=cuda"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "model.device cuda: this machine has no CUDA GPU that torch can use" in done.stderr
    assert "Traceback" not in done.stderr
