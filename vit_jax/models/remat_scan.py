"""The encoder's blocks rematerialized and scanned (big_vision's tree)."""

from collections.abc import Callable

import flax.linen as nn
import jax
import numpy as np

# What each block keeps from its forward pass for the backward pass
# (`jax.checkpoint_policies`); the rest is recomputed there.
REMAT_POLICIES = dict(
    none=None,
    # The least memory, for about a third more compute.
    full=jax.checkpoint_policies.nothing_saveable,
    # Keeps the weight matmuls' outputs; recomputes the cheap rest, so the
    # tokens x tokens attention maps are not kept.
    dots=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)


def check(remat: str, scan: bool, stochastic_depth_rate: float) -> None:
  """Raises ValueError, in one line, for values the encoder cannot run."""
  if remat not in REMAT_POLICIES:
    raise ValueError(f'remat={remat!r}; use one of {tuple(REMAT_POLICIES)}.')
  if not isinstance(scan, (bool, np.bool_)):  # as the registry takes it
    raise ValueError(f'scan={scan!r}; use True or False.')
  if scan and stochastic_depth_rate:
    raise ValueError(
        f'scan=True runs one block definition for every layer and cannot '
        f'give each its own drop-path rate (stochastic_depth_rate='
        f'{stochastic_depth_rate}): set scan=False or stochastic_depth_rate=0.')


def block_call(
    remat: str, deterministic: bool,
    prevent_cse: bool) -> Callable[[nn.Module, jax.Array], jax.Array]:
  """(block, x) -> block(x), rematerialized as `remat` says."""

  # `deterministic` is closed over: remat would trace an argument.

  def call(block: nn.Module, x: jax.Array) -> jax.Array:
    return block(x, deterministic=deterministic)

  # Rematerialized, a lifted function of the block module: its variables stay
  # under the block's own name, so the tree is the same with or without remat.
  return call if remat == 'none' else nn.remat(
      call, policy=REMAT_POLICIES[remat], prevent_cse=prevent_cse)


def scan_blocks(block: nn.Module, x: jax.Array, *, num_layers: int,
                deterministic: bool, remat: str) -> jax.Array:
  """`block` over `num_layers` slices of its stacked parameters and rngs."""
  # Inside a scan XLA cannot merge the recomputation with the forward pass,
  # so remat needs no CSE barrier there (flax's advice).
  call = block_call(remat, deterministic, prevent_cse=False)

  def body(module: nn.Module, carry: jax.Array, _) -> tuple[jax.Array, None]:
    return call(module, carry), None

  x, _ = nn.scan(body, variable_axes={'params': 0, 'intermediates': 0},
                 split_rngs={'params': True, 'dropout': True},
                 length=num_layers)(block, x, None)
  return x
