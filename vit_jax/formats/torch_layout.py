"""Our parameter tree as a PyTorch library's state dict and back, by each
format's `Rule`s. The layouts work on numpy arrays and, for
`jax.eval_shape`, on abstract ones, so a format derives its expected shapes.
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
    'same': (lambda x: x, lambda x, heads: x), 'linear':
        (lambda kernel: kernel.T, lambda weight, heads: weight.T), 'conv2d':
            (lambda kernel: kernel.transpose(3, 2, 0, 1),
             lambda weight, heads: weight.transpose(2, 3, 1, 0)),
    'heads_in':
        (lambda kernel: kernel.reshape(kernel.shape[0], -1).T,
         lambda weight, heads: weight.T.reshape(weight.shape[1], heads, -1)),
    'heads_out':
        (lambda kernel: kernel.reshape(-1, kernel.shape[-1]).T,
         lambda weight, heads: weight.T.reshape(heads, -1, weight.shape[0])),
    'heads_bias': (lambda bias: bias.reshape(-1),
                   lambda bias, heads: bias.reshape(heads, -1)),
}


@dataclasses.dataclass(frozen=True)
class Rule:
  """One array: its path in our tree (in a block, relative to it), its name
  in theirs (`{i}`: the block's index), and its `_LAYOUTS` key."""
  ours: str
  theirs: str
  layout: str = 'same'


def to_state(params: dict, top: list[Rule], block: list[Rule]) -> dict:
  """Our tree (either block layout) as their state dict."""
  flat = params_lib.flatten(params_lib.unstack_blocks(params), 'the parameters')
  state = {
      rule.theirs: _LAYOUTS[rule.layout][0](flat[rule.ours]) for rule in top
      if rule.ours in flat
  }
  i = 0
  while f'{names.ENCODER}/{names.block_name(i)}/' + block[0].ours in flat:
    prefix = f'{names.ENCODER}/{names.block_name(i)}/'
    state.update({
        rule.theirs.format(i=i): _LAYOUTS[rule.layout][0]
                                 (flat[prefix + rule.ours]) for rule in block
    })
    i += 1
  return state


def from_state(state: dict, top: list[Rule], block: list[Rule], num_layers: int,
               num_heads: int) -> dict:
  """Their state dict, once `check_state` has passed, as our tree."""
  flat = {
      rule.ours: _LAYOUTS[rule.layout][1](state[rule.theirs], num_heads)
      for rule in top if rule.theirs in state
  }
  for i in range(num_layers):
    prefix = f'{names.ENCODER}/{names.block_name(i)}/'
    flat.update({
        prefix + rule.ours: _LAYOUTS[rule.layout][1]
                            (state[rule.theirs.format(i=i)], num_heads)
        for rule in block
    })
  return flax.traverse_util.unflatten_dict(flat, sep='/')


def check_state(state: dict, expected: dict, *, optional: tuple[str, ...],
                source: str, target: str) -> None:
  """CheckpointError naming, in their names, every array of `state` that
  does not fit `expected`; `optional` arrays may be absent."""
  expected = {
      key: value for key, value in expected.items()
      if key in state or key not in optional
  }
  params_lib.check_params(state, expected, source=source, target=target)


def concatenate(arrays: list[Any]) -> Any:
  return _xp(arrays[0]).concatenate(arrays)


def split(array: Any, parts: int) -> list[Any]:
  return _xp(array).split(array, parts)
