"""The `[model]`, `[ppo]` and `[baseline]` config sections."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from five_actors.schedule import Schedule, check_schedule

WIDTHS = ("entity_hidden", "entity_embed", "core_input", "lstm_size", "pointer_key")
"""The network's widths: set here, carried by every ModelSpec, changed by surgery."""


@dataclass(frozen=True)
class ModelConfig:
    """The network's sizes and where it runs. Sizes go into the ModelSpec; surgery changes them later."""

    device: str = "cpu"
    """Torch device for the policy: "cpu", "cuda" or "cuda:N"."""
    precision: Literal["fp32", "bf16", "auto"] = "fp32"
    """Arithmetic of the encoders and the core, where the matrix products are: "fp32", "bf16" (torch autocast to
    bfloat16; the heads, the value, the LSTM state between steps, the loss and Adam stay fp32), or "auto": bf16 on a
    device that multiplies bfloat16 in hardware (a CPU with AVX-512 BF16 or AMX, a GPU that supports it), else fp32.
    bf16 pays for wide networks, and on this project's 2-core CPU for the default too (README, runs B0 and B1); the
    learners, the inference actor and the eval follow it."""
    entity_hidden: int = 64
    """Hidden width of each entity block's encoder MLP."""
    entity_embed: int = 64
    """Width of each entity embedding (the encoder's output, pooled over slots)."""
    core_input: int = 128
    """Width of the layer between the pooled embeddings and the LSTM."""
    core: Literal["lstm", "mlp"] = "lstm"
    """The core: "lstm" (memory across steps) or "mlp" (one ReLU layer of `lstm_size` units, no memory)."""
    lstm_size: int = 128
    """Units of the core (OpenAI Five's LSTM had 4096; thousands are practical on a GPU)."""
    pointer_key: int = 32
    """Width of the attention keys and queries of pointer (target) heads."""

    def __post_init__(self) -> None:
        for name in WIDTHS:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.precision not in ("fp32", "bf16", "auto"):
            raise ValueError(f"precision must be 'fp32', 'bf16' or 'auto', got {self.precision!r}")
        if self.core not in ("lstm", "mlp"):
            raise ValueError(f"core must be 'lstm' or 'mlp', got {self.core!r}")
        if not (self.device == "cpu" or self.device == "cuda" or self.device.startswith("cuda:")):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")


@dataclass(frozen=True)
class PPOConfig:
    """Proximal policy optimisation with GAE and truncated backprop through LSTM chunks."""

    learning_rate: Schedule = 2.5e-4
    """Adam step size, a schedule over parameter versions (OpenAI Five used 5e-5 and lower, with
    batches thousands of times ours)."""
    adam_beta1: float = 0.9
    """Adam's first-moment decay."""
    adam_beta2: float = 0.999
    """Adam's second-moment decay."""
    adam_eps: float = 1e-5
    """Adam's denominator epsilon."""
    horizon_seconds: float = 180.0
    """Reward horizon H in game seconds; gamma = 1 - T/H with T the env's seconds per step (paper: 180, later 360)."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip: float = 0.2
    """PPO ratio clip epsilon."""
    value_loss_weight: float = 0.5
    """Weight of the value loss in the total loss."""
    entropy_coef: Schedule = ((0.0, 0.01), (3000.0, 0.001))
    """Weight of the entropy bonus, a schedule over parameter versions (the paper: 0.01 -> 0.001)."""
    max_grad_norm: float = 0.5
    """Each parameter tensor's gradient is clipped to this L2 norm on its own."""
    normalize_advantages: bool = True
    """Normalise advantages to mean 0, std 1 per minibatch."""
    kl_stop: float = 0.0
    """Skip the optimizer step of a minibatch whose approximate KL between the acting policy and the current one
    exceeds this (0: never). Not in the paper; Stable-Baselines3's `target_kl` stops epochs the same way."""

    def __post_init__(self) -> None:
        check_schedule("learning_rate", self.learning_rate, 0.0, 1.0)
        check_schedule("entropy_coef", self.entropy_coef, 0.0, 1.0)
        positive = ("adam_eps", "horizon_seconds", "clip", "max_grad_norm")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("adam_beta1", "adam_beta2", "gae_lambda"):
            if not 0.0 <= getattr(self, name) < 1.0 + (name == "gae_lambda"):
                raise ValueError(
                    f"{name} must be in [0, 1{']' if name == 'gae_lambda' else ')'}, got {getattr(self, name)}"
                )
        if self.kl_stop < 0:
            raise ValueError(f"kl_stop must not be negative (0 turns it off), got {self.kl_stop}")
        if self.value_loss_weight < 0:
            raise ValueError(f"value_loss_weight must not be negative, got {self.value_loss_weight}")

    def gamma(self, seconds_per_step: float) -> float:
        """The discount for an env whose steps last `seconds_per_step`: 1 - T/H, as in the paper."""
        if not 0 < seconds_per_step < self.horizon_seconds:
            raise ValueError(
                f"seconds_per_step must be in (0, horizon_seconds={self.horizon_seconds}), got {seconds_per_step}"
            )
        return 1.0 - seconds_per_step / self.horizon_seconds


@dataclass(frozen=True)
class BaselineConfig:
    """The `[baseline]` section: the synchronous baseline's loop (five_actors.model.baseline; `bench learn`,
    `bench system`). `up` does not read it: the actor system's learners step on `training.minibatch_chunks`
    chunks until `training.max_sample_reuse`. Both cut rollouts into `training.rollout_chunk_steps` steps."""

    rollout_chunks: int = 8
    """Chunks each row collects before an update (a rollout is rollout_chunk_steps * this steps)."""
    epochs: int = 4
    """Passes over each rollout's chunks."""
    minibatches: int = 4
    """Minibatches per epoch (the chunks of a rollout are split this many ways)."""
    anneal_learning_rate: bool = True
    """Decay the learning rate linearly to zero over a run of known length."""

    def __post_init__(self) -> None:
        for name in ("rollout_chunks", "epochs", "minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
