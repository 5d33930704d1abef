"""The anneal mask for added action types, and one surgery over several parameter versions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from five_actors.errors import SurgeryRejected
from five_actors.surgery.anneal import apply_anneal
from five_actors.surgery.ops import SurgeryOp
from five_actors.surgery.state import ModelState
from five_actors.surgery.verify import Probes, operate_all

TYPES = ("noop", "move", "recall")


def test_annealed_type_is_legal_only_in_the_share_of_games() -> None:
    game_of_row = np.repeat(np.arange(4), 2)
    masks = [apply_anneal(np.ones((8, 3), bool), TYPES, {"recall": share}, game_of_row, 4) for share in (0.0, 0.5, 1.0)]
    assert [int(m[:, 2].sum()) for m in masks] == [0, 4, 8]
    assert masks[1][:4, 2].all() and not masks[1][4:, 2].any()
    assert all(m[:, :2].all() for m in masks)  # other types untouched


def test_anneal_refuses_unknown_types_and_bad_shares() -> None:
    with pytest.raises(SurgeryRejected, match="'blink' is not one of"):
        apply_anneal(np.ones((2, 3), bool), TYPES, {"blink": 0.5}, np.zeros(2, int), 1)
    with pytest.raises(SurgeryRejected, match="within"):
        apply_anneal(np.ones((2, 3), bool), TYPES, {"recall": 1.5}, np.zeros(2, int), 1)


def test_one_surgery_over_several_versions_is_all_or_nothing(trained: ModelState, probes_v1: Probes) -> None:
    ops = [SurgeryOp("widen-lstm", ("40",))]
    past = ModelState(trained.spec, trained.params)  # pool versions keep no optimizer state
    results = operate_all(ops, {3: past, 5: trained}, probes_v1)
    assert {k: r[0].spec.lstm_size for k, r in results.items()} == {3: 40, 5: 40}
    assert results[3][0].optimizer is None and results[5][0].optimizer is not None
    assert torch.equal(results[3][0].params["lstm.weight_hh"], results[5][0].params["lstm.weight_hh"])  # same new units
    assert all(r[1].preserved for r in results.values())
    wider = results[5][0]
    with pytest.raises(SurgeryRejected, match="version 7: .*removal is not supported"):
        operate_all([SurgeryOp("widen-lstm", ("36",))], {3: trained, 7: wider}, probes_v1)
