"""Our parameter tree as a PyTorch library's state dict and back, for the
formats of timm and transformers: each declares its `Rule`s (which of our
arrays is which of theirs, and in which layout), and `to_state` and
`from_state` apply them either way.

The layouts: a Dense kernel (in, out) is a Linear weight (out, in), a Conv
kernel (h, w, in, out) a Conv2d weight (out, in, h, w), attention's
per-head kernels (in, heads, head_dim) and (heads, head_dim, out) Linear
weights with the heads flattened, a per-head bias (heads, head_dim) a flat
one. Each works on numpy arrays and, for `jax.eval_shape`, on jax's
abstract ones, so a format derives the shapes it expects from a model's.
"""

import dataclasses
from typing import Any

import flax
import jax.numpy as jnp
import numpy as np

from vit_jax.formats import params as params_lib
from vit_jax.models import names


def _xp(array):
  return np if isinstance(array, np.ndarray) else jnp


# Layout name -> (ours to theirs, theirs to ours given the number of heads).
_LAYOUTS = {
    'same': (lambda x: x, lambda x, heads: x),
    'linear': (lambda kernel: kernel.T, lambda weight, heads: weight.T),
    'conv2d': (lambda kernel: kernel.transpose(3, 2, 0, 1),
               lambda weight, heads: weight.transpose(2, 3, 1, 0)),
    'heads_in': (lambda kernel: kernel.reshape(kernel.shape[0], -1).T,
                 lambda weight, heads: weight.T.reshape(weight.shape[1],
                                                        heads, -1)),
    'heads_out': (lambda kernel: kernel.reshape(-1, kernel.shape[-1]).T,
                  lambda weight, heads: weight.T.reshape(heads, -1,
                                                         weight.shape[0])),
    'heads_bias': (lambda bias: bias.reshape(-1),
                   lambda bias, heads: bias.reshape(heads, -1)),
}


@dataclasses.dataclass(frozen=True)
class Rule:
  """One array: its '/'-joined path in our tree (in an encoder block,
  relative to the block), its name in theirs (`{i}`: the block's index),
  and its `layout` ('same', 'linear', 'conv2d', 'heads_in', 'heads_out',
  'heads_bias')."""
  ours: str
  theirs: str
  layout: str = 'same'


def to_state(params: dict, top: list[Rule], block: list[Rule]) -> dict:
  """Our tree (either block layout) as their state dict; arrays the tree
  lacks (a class token, a head) are left out."""
  flat = params_lib.flatten(params_lib.unstack_blocks(params),
                            'the parameters')
  state = {rule.theirs: _LAYOUTS[rule.layout][0](flat[rule.ours])
           for rule in top if rule.ours in flat}
  i = 0
  while f'{names.ENCODER}/{names.block_name(i)}/' + block[0].ours in flat:
    prefix = f'{names.ENCODER}/{names.block_name(i)}/'
    state.update({rule.theirs.format(i=i):
                  _LAYOUTS[rule.layout][0](flat[prefix + rule.ours])
                  for rule in block})
    i += 1
  return state


def from_state(state: dict, top: list[Rule], block: list[Rule],
               num_layers: int, num_heads: int) -> dict:
  """Their state dict as our tree (the official layout), once
  `check_state` has passed; arrays the state lacks are left out."""
  flat = {rule.ours: _LAYOUTS[rule.layout][1](state[rule.theirs], num_heads)
          for rule in top if rule.theirs in state}
  for i in range(num_layers):
    prefix = f'{names.ENCODER}/{names.block_name(i)}/'
    flat.update({prefix + rule.ours: _LAYOUTS[rule.layout][1](
        state[rule.theirs.format(i=i)], num_heads) for rule in block})
  return flax.traverse_util.unflatten_dict(flat, sep='/')


def check_state(state: dict, expected: dict, *, optional: tuple[str, ...],
                source: str, target: str) -> None:
  """CheckpointError naming, in their names, every array of `state` that is
  missing, unexpected or of another shape than in `expected` (what
  `to_state` makes of a model's shapes); `optional` arrays may be absent."""
  expected = {key: value for key, value in expected.items()
              if key in state or key not in optional}
  params_lib.check_params(state, expected, source=source, target=target)


def concatenate(arrays: list[Any]) -> Any:
  return _xp(arrays[0]).concatenate(arrays)


def split(array: Any, parts: int) -> list[Any]:
  return _xp(array).split(array, parts)

