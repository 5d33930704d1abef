"""The policy: one network that plays every agent, built from a ModelSpec.

    obs row ──split into entity blocks──> per-block running normaliser (clip +-5)
            ──> per-block MLP encoder, shared over the block's slots ──> entity embeddings
            ──> max-pool over present slots (single-slot blocks pass through) ──> concat
            ──> linear + ReLU ──> LSTM core ──> type head, secondary heads, value head

With `spec.core == "mlp"` the LSTM is one linear + ReLU layer of `lstm_size` units: the state
(h, c) keeps its shape so messages and chunks do not change, but h is only the last output
and is never read back, and c stays 0.

A pointer head attends from the core output over the entity embeddings of the blocks it
points at. Sampling and log-probabilities respect the masks; the log-probability and
entropy of an action add only the secondary heads that its type uses. Real-valued actions
(`spec.actions.continuous`) come from a Gaussian head: a linear mean from the core and a learned
log standard deviation per dimension; their values ride in the action columns as float64 bits.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from five_actors.errors import ModelError
from five_actors.model.kept import kept
from five_actors.model.normalizer import RunningNorm, ValueNorm
from five_actors.model.spec import ModelSpec

MASKED_LOGIT = -1e9
"""Logit of an illegal choice: finite, so entropy terms are 0 * -1e9 = 0 rather than NaN."""

State = tuple[Tensor, Tensor]
"""The LSTM state (h, c), each [rows, lstm_size]."""

# cuDNN says this of `core_sequence`'s fused LSTM on a GPU: its weights are the LSTM cell's four tensors, which it
# copies into its own layout at each call (a few hundred KB, beside a minibatch's forward and backward).
warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk of memory")

_DRAW_WEIGHTS: ContextVar[bool] = ContextVar("draw_weights", default=True)
"""False while `blank_policy` builds one: its layers skip drawing initial weights."""


@dataclass
class ActOutput:
    """What one forward pass for acting returns, per row."""

    actions: Tensor
    """int64 [rows, columns]: the type, then each secondary head's choice (0 when unused), then the Gaussian head's
    values as float64 bits."""
    logp: Tensor
    """float [rows]: log-probability of the whole action under the policy."""
    value: Tensor
    """float [rows]: the value estimate of the observation."""
    state: State
    """The LSTM state after this step."""


class Policy(nn.Module):
    """Entity encoders, an LSTM core, masked action heads and a value head, shaped by `spec`."""

    uses: Tensor
    """bool [types, heads]: which secondary heads each action type uses (a buffer)."""

    def __init__(self, spec: ModelSpec, precision: str = "fp32") -> None:
        super().__init__()
        self.spec = spec
        self.precision = precision
        """The encoders' and the core's arithmetic as configured: "fp32", "bf16" under autocast, or "auto"
        (ModelConfig.precision); `arithmetic` is what it comes to on this policy's device."""
        blocks = spec.obs.blocks
        for name in [b.name for b in blocks] + [h.name for h in spec.actions.heads]:
            if not name.isidentifier():
                raise ModelError(f"block and head names must be identifiers, got {name!r}")
        self.norms = nn.ModuleDict({b.name: RunningNorm(b.width) for b in blocks})
        self.encoders = nn.ModuleDict(
            {
                b.name: nn.Sequential(
                    _layer(b.width, spec.entity_hidden, kind=FewInputsLinear),
                    nn.ReLU(),
                    _layer(spec.entity_hidden, spec.entity_embed),
                    nn.ReLU(),
                )
                for b in blocks
            }
        )
        self.combine = _layer(len(blocks) * spec.entity_embed, spec.core_input)
        if spec.core == "lstm":
            self.lstm = (
                nn.LSTMCell(spec.core_input, spec.lstm_size)
                if _DRAW_WEIGHTS.get()
                else nn.utils.skip_init(nn.LSTMCell, spec.core_input, spec.lstm_size)
            )
        else:
            self.mlp = _layer(spec.core_input, spec.lstm_size)
        self.type_head = _layer(spec.lstm_size, len(spec.actions.types), gain=0.01)
        self.heads = nn.ModuleDict()
        for head in spec.actions.heads:
            if head.pointer_blocks:
                self.heads[head.name] = PointerHead(spec.lstm_size, spec.entity_embed, spec.pointer_key)
            else:
                self.heads[head.name] = _layer(spec.lstm_size, head.size, gain=0.01)
        if spec.actions.continuous:
            self.mean_head = _layer(spec.lstm_size, spec.actions.continuous, gain=0.01)
            self.log_std = nn.Parameter(torch.zeros(spec.actions.continuous))
            """The Gaussian head's log standard deviations: learned, the same for every state (std 1 at first)."""
        self.value_head = _layer(spec.lstm_size, 1, gain=1.0)
        self.value_norm = ValueNorm()
        self.register_buffer("uses", torch.as_tensor(spec.actions.uses_array()), persistent=False)

    @property
    def device(self) -> torch.device:
        """Where the parameters live (from `model.device`)."""
        return self.type_head.weight.device

    def initial_state(self, rows: int) -> State:
        """The zero LSTM state for `rows` agents starting an episode."""
        zeros = torch.zeros(rows, self.spec.lstm_size, device=self.device)
        return zeros, zeros.clone()

    @torch.no_grad()
    def act(self, obs: Any, masks: Mapping[str, Any], state: State, deterministic: bool = False) -> ActOutput:
        """Choose one legal action per row (sampled, or the most likely when `deterministic`)."""
        obs_t, masks_t = self.prepare(obs, masks)
        with self._lowered():
            embeddings, core_in = self.encode(obs_t)
            h, c = self.core_step(core_in, state)
        embeddings, h, c = _full(embeddings), h.float(), c.float()
        choice, logp, _ = self._heads(h, embeddings, masks_t, None, deterministic)
        return ActOutput(choice, logp, self.value_norm.denormalize(self.value_head(h).squeeze(-1)), (h, c))

    def evaluate(
        self, obs: Tensor, masks: Mapping[str, Tensor], actions: Tensor, starts: Tensor, state: State
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Log-prob, entropy and normalised value (see ValueNorm) of given actions over a sequence, for the loss.

        Inputs are time-major `[T, B, ...]`; `starts[t, b]` is true where step t begins a new
        episode, and resets row b's LSTM state before that step (an episode ended inside
        the chunk). `state` is the chunk's stored state before step 0.
        """
        steps, batch = obs.shape[:2]

        def flat(x: Tensor) -> Tensor:
            return x.reshape(steps * batch, *x.shape[2:])

        with self._lowered():
            embeddings, core_in = self.encode(flat(obs))
            keep = (~starts).to(core_in.dtype).unsqueeze(-1)
            core = self.core_sequence(core_in.reshape(steps, batch, -1), keep, state).reshape(steps * batch, -1)
        embeddings, core = _full(embeddings), core.float()
        flat_masks = {k: flat(v) for k, v in masks.items()}
        _, logp, entropy = self._heads(core, embeddings, flat_masks, flat(actions), False)
        value = self.value_head(core).squeeze(-1)
        return logp.reshape(steps, batch), entropy.reshape(steps, batch), value.reshape(steps, batch)

    @property
    def arithmetic(self) -> str:
        """What `precision` comes to here: "bf16" for "bf16", and for "auto" on a device that multiplies bfloat16 in
        hardware; else "fp32"."""
        if self.precision == "auto":
            return "bf16" if bf16_native(self.device) else "fp32"
        return self.precision

    def _lowered(self) -> torch.autocast:
        """Autocast to bfloat16 where the arithmetic is "bf16" (a no-op context otherwise)."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.arithmetic == "bf16")

    def prepare(self, obs: Any, masks: Mapping[str, Any]) -> tuple[Tensor, dict[str, Tensor]]:
        """Observations and masks as tensors on this device, checked against the spec."""
        obs_t = torch.as_tensor(obs, device=self.device)
        masks_t = {k: torch.as_tensor(v, device=self.device) for k, v in masks.items()}
        self.check_obs(obs_t)
        self.check_masks(masks_t, obs_t.shape[0])
        return obs_t.float(), masks_t

    def check_obs(self, obs: Tensor) -> None:
        """Refuse observations of the wrong shape or type, or holding NaN/inf (naming the feature)."""
        size = self.spec.obs.size
        if obs.ndim != 2 or obs.shape[1] != size:
            raise ModelError(f"observations have shape {tuple(obs.shape)}, expected [rows, {size}]")
        if not obs.is_floating_point():
            raise ModelError(f"observations must be floating point, got {obs.dtype}")
        if torch.isfinite(obs.sum()):  # NaN and inf carry through a sum; only a non-finite sum is looked into
            return
        bad = ~torch.isfinite(obs)
        if bad.any():
            row, column = (int(i) for i in bad.nonzero()[0])
            raise ModelError(f"observation {self._feature_name(column)} of row {row} is {obs[row, column].item()}")

    def check_masks(self, masks: Mapping[str, Tensor], rows: int) -> None:
        """Refuse masks missing, misshapen, not bool, or leaving a needed head with no legal choice."""
        actions = self.spec.actions
        expected = actions.mask_shapes(rows)
        if set(masks) != set(expected):
            raise ModelError(f"masks have keys {sorted(masks)}, expected {sorted(expected)}")
        for name, shape in expected.items():
            if tuple(masks[name].shape) != shape or masks[name].dtype != torch.bool:
                raise ModelError(
                    f"mask {name!r} is {masks[name].dtype} {tuple(masks[name].shape)}, expected bool {shape}"
                )
        empty = ~masks["type"].any(-1)
        if empty.any():
            raise ModelError(f"all-masked head 'type' at row {int(empty.nonzero()[0])}: no legal action type")
        for j, head in enumerate(actions.heads):
            needed = masks["type"] & self.uses[:, j]
            empty = needed & ~masks[head.name].any(-1)
            if empty.any():
                row, t = (int(i) for i in empty.nonzero()[0])
                raise ModelError(
                    f"all-masked head {head.name!r} at row {row}: legal type {actions.types[t]!r} uses it but no "
                    "choice is legal"
                )

    def update_normalizer(self, obs: Tensor) -> None:
        """Fold a batch of raw observations `[rows, size]` into the running statistics."""
        for block, x in self.spec.obs.split(obs.reshape(-1, self.spec.obs.size).float()).items():
            present = x[..., 0] > 0.5 if x.shape[1] > 1 else torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
            norm = self.norms[block]
            assert isinstance(norm, RunningNorm)
            norm.update(x[present])

    def core_step(self, x: Tensor, state: State) -> State:
        """One step of the core: the LSTM, or the MLP layer (which ignores and passes on the state's c)."""
        if self.spec.core == "lstm":
            cell = self.lstm
            h, c = torch.lstm_cell(x, state, *lowered(cell, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh))
            return h, c
        return torch.relu(self.mlp(x)), state[1]

    def core_sequence(self, core_in: Tensor, keep: Tensor, state: State) -> Tensor:
        """The core's outputs `[T, B, lstm_size]` over a sequence `[T, B, core_input]` from `state`, the state
        multiplied by `keep[t]` `[T, B, 1]` before step t (0 where an episode starts): what `core_step` gives step by
        step. The MLP core, having no recurrence, runs in one pass; the LSTM runs as torch's fused LSTM (the same cell)
        over each stretch of steps where no row starts an episode, mostly the whole chunk: one product per stretch in
        the backward instead of one per step, 1.5x faster on the default's chunks."""
        if self.spec.core != "lstm":
            return torch.relu(self.mlp(core_in))
        weights = [self.lstm.weight_ih, self.lstm.weight_hh, self.lstm.bias_ih, self.lstm.bias_hh]
        starts = (keep[1:, :, 0] == 0).any(dim=1).nonzero().flatten() + 1
        bounds = [0, *starts.tolist(), core_in.shape[0]]
        h, c = state
        outputs = []
        training = torch.is_grad_enabled()
        for begin, end in zip(bounds, bounds[1:]):
            hx = ((h * keep[begin]).unsqueeze(0), (c * keep[begin]).unsqueeze(0))
            out, h_n, c_n = torch.lstm(core_in[begin:end], hx, weights, True, 1, 0.0, training, False, False)
            h, c = h_n[0], c_n[0]
            outputs.append(out)
        return torch.cat(outputs)

    def encode(self, obs: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """Per-block entity embeddings `[rows, slots, embed]` and the LSTM's input `[rows, core_input]`."""
        pooled, embeddings = [], {}
        for block, x in self.spec.obs.split(obs).items():
            emb = self.encoders[block](self.norms[block](x))
            embeddings[block] = emb
            if x.shape[1] == 1:
                pooled.append(emb[:, 0])
                continue
            # Embeddings are ReLU outputs (>= 0), so zeroing absent slots leaves the max over present ones, and 0
            # where none is present.
            present = (x[..., 0] > 0.5).unsqueeze(-1)
            pooled.append((emb * present).amax(dim=1))
        return embeddings, torch.relu(self.combine(torch.cat(pooled, dim=-1)))

    def head_logits(self, core: Tensor, embeddings: dict[str, Tensor]) -> dict[str, Tensor]:
        """Every head's logits before masking: `type` [rows, types], a secondary head [rows, size] (a pointer
        head attends over the embeddings of the blocks it points at)."""
        logits = {"type": self.type_head(core)}
        for head in self.spec.actions.heads:
            module = self.heads[head.name]
            if head.pointer_blocks:
                logits[head.name] = module(core, [embeddings[b] for b in head.pointer_blocks])
            else:
                logits[head.name] = module(core)
        return logits

    def _heads(
        self,
        core: Tensor,
        embeddings: dict[str, Tensor],
        masks: Mapping[str, Tensor],
        actions: Tensor | None,
        deterministic: bool,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Chosen (or given) actions, their log-probs and entropies; unused heads add nothing."""
        rows = torch.arange(core.shape[0], device=core.device)
        raw = self.head_logits(core, embeddings)
        type_logits = raw["type"].masked_fill(~masks["type"], MASKED_LOGIT)
        chosen_type = _choose(type_logits, deterministic) if actions is None else actions[:, 0]
        logp, entropy = _logp_entropy(type_logits, chosen_type)
        columns = [chosen_type]
        for j, head in enumerate(self.spec.actions.heads):
            logits = raw[head.name].masked_fill(~masks[head.name][rows, chosen_type], MASKED_LOGIT)
            used = self.uses[chosen_type, j]
            choice = _choose(logits, deterministic) if actions is None else actions[:, 1 + j]
            head_logp, head_entropy = _logp_entropy(logits, choice)
            logp = logp + torch.where(used, head_logp, torch.zeros_like(head_logp))
            entropy = entropy + torch.where(used, head_entropy, torch.zeros_like(head_entropy))
            columns.append(torch.where(used, choice, torch.zeros_like(choice)))
        chosen = torch.stack(columns, dim=1)
        dims = self.spec.actions.continuous
        if not dims:
            return chosen, logp, entropy
        mean = self.mean_head(core)
        log_std = self.log_std.expand_as(mean)
        if actions is not None:
            value = actions[:, -dims:].contiguous().view(torch.float64).to(mean.dtype)
        else:
            value = mean if deterministic else mean + log_std.exp() * torch.randn_like(mean)
        gaussian = -0.5 * ((value - mean) / log_std.exp()).square() - log_std - 0.5 * math.log(2 * math.pi)
        logp = logp + gaussian.sum(-1)
        entropy = entropy + (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
        return torch.cat([chosen, value.to(torch.float64).view(torch.int64)], dim=1), logp, entropy

    def _feature_name(self, column: int) -> str:
        start = 0
        for b in self.spec.obs.blocks:
            if column < start + b.size:
                slot, feature = divmod(column - start, b.width)
                return f"{b.name}[{slot}].{b.features[feature]}"
            start += b.size
        return f"column {column}"


class PointerHead(nn.Module):
    """Logits over entity slots: scaled dot products of a query from the core with per-entity keys.

    The keys are never formed: q . (W e + b) = (W^T q) . e + q . b, so the query is taken back to the
    entities' width once per row instead of a key computed for every slot (the update's costliest product
    before)."""

    def __init__(self, core_size: int, embed_size: int, key_size: int) -> None:
        super().__init__()
        self.query = _layer(core_size, key_size, gain=0.01)
        self.key = _layer(embed_size, key_size)
        self.scale = 1.0 / math.sqrt(key_size)

    def forward(self, core: Tensor, blocks: list[Tensor]) -> Tensor:
        """`core` [rows, core_size], `blocks` of entities [rows, slots, embed] -> logits [rows, all slots in order]."""
        query = self.query(core)
        back = query @ self.key.weight
        bias = (query @ self.key.bias).unsqueeze(-1)
        # A broadcast product summed over the width, not an einsum: the einsum's batched products of one row each
        # made its backward (an outer product per row) the update's costliest step.
        back = back.unsqueeze(1)
        return torch.cat([(b * back).sum(-1) + bias for b in blocks], dim=1) * self.scale


def blank_policy(spec: ModelSpec, precision: str = "fp32") -> Policy:
    """A Policy whose weights are not drawn, for a caller that loads every parameter next: for Sample Factory's
    512-unit LSTM network drawing them took 37 ms, building blank and loading 9, and the inference actor builds a
    policy for every version it plays."""
    token = _DRAW_WEIGHTS.set(False)
    try:
        return Policy(spec, precision)
    finally:
        _DRAW_WEIGHTS.reset(token)


class Linear(nn.Linear):
    """nn.Linear, but acting under autocast it multiplies by its weights as `lowered` keeps them."""

    def forward(self, x: Tensor) -> Tensor:
        weight, bias = lowered(self, self.weight, self.bias)
        return nn.functional.linear(x, weight, bias)


class FewInputsLinear(Linear):
    """A linear layer on an entity block's few features (8-33 here) for many slot rows, computed so that its weight's
    gradient is taken as (x^T g)^T: torch's linear takes it as g^T x, a product whose short side is the few features,
    six times slower (2.9 against 0.45 ms for the structures block of a 1,024-row batch)."""

    def forward(self, x: Tensor) -> Tensor:
        weight, bias = lowered(self, self.weight, self.bias)
        flat = torch.addmm(bias, x.reshape(-1, self.in_features), weight.t().contiguous())
        return flat.reshape(*x.shape[:-1], self.out_features)


def lowered(module: nn.Module, *weights: Tensor) -> tuple[Tensor, ...]:
    """`weights` as a layer of `module` should multiply by them: as they are, or where it acts under autocast (no
    gradient: the weights do not change from call to call) copies in autocast's dtype kept until they change, the
    values autocast would cast them to at every call. Those casts took a twentieth of an act in bf16."""
    device = weights[0].device.type
    if torch.is_grad_enabled() or not torch.is_autocast_enabled(device):
        return weights
    dtype = torch.get_autocast_dtype(device)
    return kept(module, weights, lambda: tuple(w.to(dtype) for w in weights), tag=dtype)


def _layer(inputs: int, outputs: int, gain: float = math.sqrt(2), kind: type[nn.Linear] = Linear) -> nn.Linear:
    """A linear layer (`kind`) with orthogonal weights of `gain` and zero bias (small gains for policy logits)."""
    if not _DRAW_WEIGHTS.get():
        blank: nn.Linear = nn.utils.skip_init(kind, inputs, outputs)
        return blank
    layer = kind(inputs, outputs)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


@functools.cache
def bf16_native(device: torch.device = torch.device("cpu")) -> bool:
    """Whether `device` multiplies bfloat16 in hardware (a CPU with AVX-512 BF16 or AMX, a GPU that supports it), where
    model.precision = "bf16" pays and "auto" takes it."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _full(embeddings: dict[str, Tensor]) -> dict[str, Tensor]:
    """Embeddings in fp32 for the heads (they are bfloat16 out of an autocast encoder)."""
    return {k: v.float() for k, v in embeddings.items()}


def _choose(logits: Tensor, deterministic: bool) -> Tensor:
    """The argmax, or a sample by the Gumbel-max trick (a masked logit never wins: its gap is ~1e9)."""
    if deterministic:
        return logits.argmax(-1)
    uniform = torch.rand_like(logits)
    return (logits - torch.log(-torch.log(uniform))).argmax(-1)


def _logp_entropy(logits: Tensor, choice: Tensor) -> tuple[Tensor, Tensor]:
    log_probs = torch.log_softmax(logits, dim=-1)
    return log_probs.gather(-1, choice.unsqueeze(-1)).squeeze(-1), -(log_probs.exp() * log_probs).sum(-1)
