"""Starting a run from pre-trained parameters, the way the paper fine-tunes.

The pre-trained tree is fitted to the new model: the position embeddings are
resized to the new patch grid as the official code does, the head is the new
model's zero-initialised one (any class count), and `pre_logits` is dropped
when the new model has none. Everything else must match exactly.
"""

from typing import Any

from absl import logging
import flax
import jax
import numpy as np
import scipy.ndimage

from vit_jax import checkpoint
from vit_jax.errors import ConfigError

_POSITION_EMBEDDING = ('Transformer', 'posembed_input', 'pos_embedding')


def resize_position_embeddings(table: np.ndarray, num_tokens: int,
                               num_prefix_tokens: int) -> np.ndarray:
  """(1, prefix + h*h, d) -> (1, num_tokens, d) for a square patch grid.

  The prefix (class-token) entries are kept; the grid is zoomed bilinearly
  (`scipy.ndimage.zoom`, order 1, corners to corners) as in the official code.
  """
  table = np.asarray(table)
  prefix, grid = table[:, :num_prefix_tokens], table[0, num_prefix_tokens:]
  old_side = int(round(np.sqrt(len(grid))))
  new_side = int(round(np.sqrt(num_tokens - num_prefix_tokens)))
  if old_side**2 != len(grid) or new_side**2 != num_tokens - num_prefix_tokens:
    raise checkpoint.CheckpointError(
        f'Cannot resize position embeddings of {len(grid)} patches to '
        f'{num_tokens - num_prefix_tokens}: only square grids are resized.')
  grid = grid.reshape(old_side, old_side, -1)
  zoom = new_side / old_side
  grid = scipy.ndimage.zoom(grid, (zoom, zoom, 1), order=1)
  return np.concatenate(
      [prefix, grid.reshape(1, new_side * new_side, -1)], axis=1).astype(
          table.dtype)


def adapt_params(pretrained: Any, fresh: Any, *,
                 num_prefix_tokens: int) -> dict:
  """The pre-trained parameters in the shape of `fresh` (the new model's
  initial parameters); raises CheckpointError (`checkpoint.check_params`)
  naming every key that does not fit."""
  pretrained = flax.traverse_util.flatten_dict(
      flax.core.unfreeze(pretrained))
  fresh = flax.traverse_util.flatten_dict(flax.core.unfreeze(fresh))
  adapted = {
      path: np.asarray(value) for path, value in pretrained.items()
      if path[0] != 'head' and (path[0] != 'pre_logits' or path in fresh)
  }
  for path, init in fresh.items():
    if path[0] == 'head':
      adapted[path] = init
    elif path[0] == 'pre_logits' and path not in pretrained:
      logging.info('The checkpoint has no %s; it starts from scratch.',
                   '/'.join(path))
      adapted[path] = init
  table = adapted.get(_POSITION_EMBEDDING)
  want = fresh.get(_POSITION_EMBEDDING)
  if table is not None and want is not None and table.shape != want.shape:
    logging.info('Resizing the position embeddings from %s to %s.',
                 table.shape, want.shape)
    adapted[_POSITION_EMBEDDING] = resize_position_embeddings(
        table, want.shape[1], num_prefix_tokens)
  unflatten = flax.traverse_util.unflatten_dict
  checkpoint.check_params(unflatten(adapted), unflatten(fresh),
                          target='the new model (config.model)')
  return unflatten({path: np.asarray(value).astype(fresh[path].dtype)
                    for path, value in adapted.items()})


def pretrained_params(config, model, fresh_params) -> dict:
  """`config.init_from` (a run directory or a released .npz) fitted to
  `model`, whose freshly initialised parameters are `fresh_params`; a
  ConfigError names what does not fit."""
  try:
    pretrained = checkpoint.load_params(config.init_from)
    adapted = adapt_params(
        pretrained, jax.device_get(fresh_params),
        num_prefix_tokens=len(getattr(model, 'prefix_tokens', ())))
  except checkpoint.CheckpointError as e:
    raise ConfigError(f'config.init_from={config.init_from!r}: {e}') from e
  logging.info('Initialised from %s.', config.init_from)
  return adapted


def use_paper_recipe(config) -> None:
  """Sets `config`'s optimizer to the paper's fine-tuning recipe (Sec. 3.1,
  App. B.1.1): SGD with momentum 0.9, no weight decay, gradients clipped to
  global norm 1, no label smoothing, no dropout (the official configs), and
  cosine decay after a linear warmup. The learning rate, length and batch
  stay the caller's."""
  config.optimizer = 'sgd'
  config.momentum = 0.9
  config.weight_decay = 0.0
  config.grad_clip_norm = 1.0
  config.label_smoothing = 0.0
  config.lr_decay = 'cosine'
  config.model_overrides.dropout_rate = 0.0
