"""Forward and update throughput (rows/s) of the default policy on the lane game's layout.

Forward: `Policy.act` on `--rows` rows (checks, sampling and value included). Update: one PPO
minibatch step (16-step BPTT, backward, per-parameter clipping, Adam) on `--chunks` chunks.
Inputs are real lane-game observations and masks. One torch thread unless `--threads`.

Beside rows/s, the work per row and the rate it is done at: MFLOP per row as torch's flop
counter counts one call (torch.utils.flop_counter: matrix products, forward and backward; the
elementwise ops are not counted), and GFLOP/s = MFLOP per row x rows/s / 1000, to set against
the device's peak.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from five_actors.actors.eval_checkpoint import device_of
from five_actors.config import Config, apply_override, from_mapping
from five_actors.game.env import LaneGame
from five_actors.model.policy import Policy
from five_actors.model.ppo import PPO, Chunks
from five_actors.model.spec import ModelSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument("--rows", type=int, default=320, help="rows per forward pass (64 games x 5 heroes = 320)")
    parser.add_argument("--chunks", type=int, default=64, help="16-step chunks per update minibatch")
    parser.add_argument("--seconds", type=float, default=5.0, help="time spent measuring each of forward and update")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override (model.*, ppo.*)",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure and report rows/s for acting and for learning."""
    torch.set_num_threads(args.threads)
    tree: dict[str, Any] = {}
    for assignment in args.overrides:
        apply_override(tree, assignment)
    config = from_mapping(Config, tree)
    device_of(config.model.device, "model.device")
    return {"benchmark": "policy", "threads": args.threads, **measure(config, args.rows, args.chunks, args.seconds)}


def measure(config: Config, rows: int, chunks: int, seconds: float) -> dict[str, Any]:
    """Rows/s, MFLOP per row and GFLOP/s of `config`'s policy acting on `rows` rows and updating on `chunks` chunks,
    each timed for about `seconds` on the torch threads set."""
    game = LaneGame(dataclasses.replace(config.game, games_per_batch=max(1, rows // 10)))
    obs, masks = game.reset(0)
    obs, masks = obs[:rows], {k: v[:rows] for k, v in masks.items()}
    policy = Policy(ModelSpec.build(game.obs_spec, game.action_spec, config.model), config.model.precision).to(
        config.model.device
    )
    state = policy.initial_state(len(obs))
    forward_calls, forward_s = _timed(lambda: policy.act(obs, masks, state), seconds, policy.device)
    forward_flops = _flops(lambda: policy.act(obs, masks, state))

    steps = config.training.rollout_chunk_steps
    pick = np.random.default_rng(0).integers(0, len(obs), (steps, chunks))
    device = policy.device
    out = policy.act(
        obs[pick.reshape(-1)], {k: v[pick.reshape(-1)] for k, v in masks.items()}, policy.initial_state(pick.size)
    )
    shape = lambda x: x.reshape(steps, chunks, *x.shape[1:])  # noqa: E731
    zeros = torch.zeros(steps, chunks, device=device)
    batch = Chunks(
        obs=torch.as_tensor(obs[pick], device=device),
        masks={k: torch.as_tensor(v[pick], device=device) for k, v in masks.items()},
        actions=shape(out.actions),
        logp=shape(out.logp),
        values=shape(out.value),
        rewards=zeros,
        dones=zeros.bool(),
        starts=zeros.bool(),
        advantages=torch.randn(steps, chunks, device=device),
        returns=torch.randn(steps, chunks, device=device),
        state=policy.initial_state(chunks),
    )
    ppo = PPO(policy, config.ppo)
    update_calls, update_s = _timed(lambda: ppo.step(batch), seconds, device)
    update_flops = _flops(lambda: ppo.step(batch))
    forward_rate = len(obs) * forward_calls / forward_s
    update_rows = steps * chunks
    update_rate = update_rows * update_calls / update_s
    return {
        "device": str(device),
        "spec_hash": policy.spec.hash,
        "parameters": sum(p.numel() for p in policy.parameters()),
        "obs_size": policy.spec.obs.size,
        "lstm_size": policy.spec.lstm_size,
        "forward_rows": len(obs),
        "forward_ms": round(1000 * forward_s / forward_calls, 3),
        "forward_rows_per_s": round(forward_rate, 1),
        "forward_mflop_per_row": round(forward_flops / len(obs) / 1e6, 4),
        "forward_gflop_per_s": round(forward_flops / len(obs) * forward_rate / 1e9, 2),
        "update_rows": update_rows,
        "update_ms": round(1000 * update_s / update_calls, 3),
        "update_rows_per_s": round(update_rate, 1),
        "update_mflop_per_row": round(update_flops / update_rows / 1e6, 4),
        "update_gflop_per_s": round(update_flops / update_rows * update_rate / 1e9, 2),
    }


def _flops(work: Any) -> int:
    """Floating-point operations of one call of `work`, as torch's flop counter counts them, with the fused LSTM's
    products (which it does not know) counted as the LSTM cell's would be."""
    with FlopCounterMode(display=False, custom_mapping=_FUSED_LSTM_FLOPS) as counter:
        work()
    return int(counter.get_total_flops())


def _lstm_flops(input_shape: Any, w_ih: Any, w_hh: Any) -> int:
    """The products of an LSTM layer's forward over `input_shape` [T, B, inputs]: x W_ih^T and h W_hh^T each step."""
    steps, batch = input_shape[0], input_shape[1]
    return 2 * steps * batch * (w_ih[0] * w_ih[1] + w_hh[0] * w_hh[1])


_FUSED_LSTM_FLOPS = {
    # CPU (oneDNN): (input, w_ih, w_hh, ...); the backward takes the input's, the state's and both weights' gradients.
    torch.ops.aten.mkldnn_rnn_layer: lambda x, w_ih, w_hh, *_, **__: _lstm_flops(x, w_ih, w_hh),
    torch.ops.aten.mkldnn_rnn_layer_backward: lambda x, w_ih, w_hh, *_, **__: 2 * _lstm_flops(x, w_ih, w_hh),
    # CUDA (cuDNN): (input, [w_ih, w_hh, ...], ...).
    torch.ops.aten._cudnn_rnn: lambda x, w, *_, **__: _lstm_flops(x, w[0], w[1]),
    torch.ops.aten._cudnn_rnn_backward: lambda x, w, *_, **__: 2 * _lstm_flops(x, w[0], w[1]),
}


def _timed(work: Any, seconds: float, device: torch.device) -> tuple[int, float]:
    """Calls made and seconds taken by calling `work` repeatedly for about `seconds` (after a warm-up call); on a GPU
    each call is waited for, as its caller would wait for the result."""

    def call() -> None:
        work()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    call()
    calls, started = 0, time.perf_counter()
    while True:
        call()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return calls, elapsed
