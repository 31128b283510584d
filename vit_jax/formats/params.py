"""What every checkpoint format shares: key paths, shapes, the fit check."""

from collections.abc import Mapping
import functools
import re
from typing import Any

from absl import logging
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.errors import CheckpointError
from vit_jax.models import names
from vit_jax.runtime import files

MAX_REPORTED = 12
# A hybrid's ResNet stem unit: (stage, unit, layer), both numbered from 1.
UNIT = re.compile(r'block(\d+)/unit(\d+)/(\w+)')
_ROOT = 'conv_root/kernel'


def flatten(tree: Mapping[str, Any], source: str,
            prefix: str = '') -> dict[str, Any]:
  """{'a/b': leaf} from {'a': {'b': leaf}}, in the tree's order."""
  flat = {}
  for name, value in tree.items():
    if not isinstance(name, str) or not name or '/' in name:
      raise CheckpointError(f'In {source}, the key {prefix}{name!r} is not '
                            'usable: keys must be non-empty strings without '
                            '"/", which separates them in .npz key paths.')
    if isinstance(value, Mapping):
      flat.update(flatten(value, source, f'{prefix}{name}/'))
    else:
      flat[prefix + name] = value
  return flat


def unflatten(flat: dict[str, Any], source: str) -> dict[str, Any]:
  """{'a': {'b': leaf}} from {'a/b': leaf}; an array cannot hold arrays."""
  for key in flat:
    parents = key.split('/')[:-1]
    for depth in range(1, len(parents) + 1):
      if (parent := '/'.join(parents[:depth])) in flat:
        raise CheckpointError(f'{source} has both an array {parent} and '
                              f'arrays under it, such as {key}.')
  return flax.traverse_util.unflatten_dict(flat, sep='/')


def is_stacked(params: Mapping[str, Any]) -> bool:
  """Whether `params` are a scanned ViT's, blocks stacked on a layer axis."""
  return names.STACKED_BLOCK in params.get(names.ENCODER, {})


def stack_blocks(params: Mapping[str, Any]) -> dict[str, Any]:
  """The official tree's blocks stacked as a scanned ViT's; others as is."""
  params = dict(flax.core.unfreeze(params))
  encoder, blocks = dict(params.get(names.ENCODER, {})), []
  while names.block_name(len(blocks)) in encoder:
    blocks.append(encoder.pop(names.block_name(len(blocks))))
  if not blocks:
    return params
  try:
    encoder[names.STACKED_BLOCK] = jax.tree.map(
        lambda *layers: np.stack(layers), *blocks)
  except ValueError as e:  # trees or shapes that differ between blocks
    raise CheckpointError('The encoder blocks differ in their arrays, so they '
                          f'cannot be stacked for a scanned model: {e}') from e
  params[names.ENCODER] = encoder
  return params


def unstack_blocks(params: Mapping[str, Any]) -> dict[str, Any]:
  """The inverse of `stack_blocks`; other trees as they are."""
  params = dict(flax.core.unfreeze(params))
  if not is_stacked(params):
    return params
  encoder = dict(params[names.ENCODER])
  stacked = encoder.pop(names.STACKED_BLOCK)
  for i in range(jax.tree.leaves(stacked)[0].shape[0]):  # the layer axis
    encoder[names.block_name(i)] = jax.tree.map(lambda a, i=i: a[i], stacked)
  params[names.ENCODER] = encoder
  return params


def variable_shapes(model: nn.Module, image_size: int) -> dict[str, Any]:
  """`model`'s variables' shapes and dtypes, computing no variable."""
  return jax.eval_shape(
      functools.partial(model.init, train=False), jax.random.key(0),
      jax.ShapeDtypeStruct((1, image_size, image_size, 3), jnp.float32))


def param_shapes(model: nn.Module, image_size: int) -> dict[str, Any]:
  """`model`'s parameter shapes and dtypes, computing no parameter."""
  return variable_shapes(model, image_size)['params']


def _shapes(tree: Mapping[str, Any], source: str) -> dict[str, tuple]:
  return {key: np.shape(value) for key, value in flatten(tree, source).items()}


def check_params(params: Mapping[str, Any], expected: Mapping[str, Any], *,
                 source: str = 'the checkpoint',
                 target: str = 'the model') -> None:
  """CheckpointError unless `params` has `expected`'s shapes (any dtypes)."""
  have, want = _shapes(params, source), _shapes(expected, target)
  # Wrong shapes and unexpected keys first: they are few and tell most.
  problems = [
      f'{key} has shape {have[key]} in {source} but {shape} in {target}'
      for key, shape in want.items() if key in have and have[key] != shape
  ]
  problems += [
      f'{key} (shape {shape}) is in {source} but not in {target}'
      for key, shape in have.items() if key not in want
  ]
  problems += [
      f'{key} is missing from {source} but {target} has it with shape {shape}'
      for key, shape in want.items() if key not in have
  ]
  if len(problems) == 1:
    raise CheckpointError(problems[0] + '.')
  if problems:
    raise CheckpointError(f'{source[:1].upper()}{source[1:]} does not fit '
                          f'{target} ({len(problems)} problems):\n  ' +
                          files.listed(problems, MAX_REPORTED, '\n  '))


def resize_patch_grid(grid: np.ndarray, num_patches: int) -> np.ndarray:
  """A square grid's position rows zoomed bilinearly, as the official code."""
  grid = np.asarray(grid)
  old_side = int(round(np.sqrt(grid.shape[1])))
  new_side = int(round(np.sqrt(num_patches)))
  if old_side**2 != grid.shape[1] or new_side**2 != num_patches:
    raise CheckpointError(
        f'Cannot resize position embeddings of {grid.shape[1]} patches to '
        f'{num_patches}: only square grids are resized.')
  # scipy zooms no bfloat16.
  square = grid.reshape(old_side, old_side,
                        -1).astype(np.promote_types(grid.dtype, np.float32))
  zoom = new_side / old_side
  # Here: scipy.ndimage is a fifth of every command's import time.
  import scipy.ndimage  # pylint: disable=g-import-not-at-top
  square = scipy.ndimage.zoom(square, (zoom, zoom, 1), order=1)
  return square.reshape(1, num_patches, -1).astype(grid.dtype)


def _fitted_position_table(table: np.ndarray, want: Any,
                           theirs: tuple[str, ...], ours: tuple[str, ...],
                           notes: list[str]) -> np.ndarray:
  """The table fitted to `want`'s tokens (a new one's row is `want`'s)."""
  table = np.asarray(table)
  # Another width is left for `check_params` to name.
  if table.shape[-1] != want.shape[-1] or (table.shape == want.shape and
                                           theirs == ours):
    return table

  def row(name):
    if name in theirs:
      i = theirs.index(name)
      return table[:, i:i + 1]
    if isinstance(want, (np.ndarray, jax.Array)):
      i = ours.index(name)
      return np.asarray(want)[:, i:i + 1].astype(table.dtype)
    return np.zeros((1, 1, want.shape[2]), table.dtype)

  if (grid := table[:, len(theirs):]).shape[1] != want.shape[1] - len(ours):
    notes.append(f'Resizing the position embeddings from {table.shape} to '
                 f'{want.shape}.')
    grid = resize_patch_grid(grid, want.shape[1] - len(ours))
  return np.concatenate([row(name) for name in ours] + [grid], axis=1)


def check_fit(pretrained: Any,
              fresh: Any) -> tuple[dict[tuple[str, ...], Any], list[str]]:
  """Raises what `adapt_params` would; else its flat tree, a note per change."""
  in_layout = stack_blocks if is_stacked(fresh) else unstack_blocks
  pretrained = flax.traverse_util.flatten_dict(in_layout(pretrained))
  fresh = flax.traverse_util.flatten_dict(fresh)
  theirs, ours = (tuple(name for name in names.PREFIX_TOKENS if (name,) in flat)
                  for flat in (pretrained, fresh))
  optional = (names.PRE_LOGITS, names.DISTILLATION_TOKEN)
  adapted, notes = {}, []
  for path, value in pretrained.items():
    if path[0] in optional and path not in fresh:
      notes.append(f'The new model has no {"/".join(path)}; the '
                   "checkpoint's is left out.")
    elif path[0] not in names.HEADS:
      adapted[path] = value
  for path, init in fresh.items():
    if path[0] in names.HEADS or names.training_only(path[0]):
      adapted[path] = init
    elif path[0] in optional and path not in pretrained:
      notes.append(f'The checkpoint has no {"/".join(path)}; it starts from '
                   'scratch.')
      adapted[path] = init
  table = adapted.get(names.POSITION_EMBEDDING_TABLE)
  want = fresh.get(names.POSITION_EMBEDDING_TABLE)
  if table is not None and want is not None:
    adapted[names.POSITION_EMBEDDING_TABLE] = _fitted_position_table(
        table, want, theirs, ours, notes)
  unflatten_paths = flax.traverse_util.unflatten_dict
  check_params(unflatten_paths(adapted), unflatten_paths(fresh),
               target='the new model (config.model)')
  return adapted, notes


def adapt_params(pretrained: Any, fresh: Any) -> dict:
  """The pre-trained parameters fitted to `fresh`, with `fresh`'s head."""
  fitted, notes = check_fit(pretrained, fresh)
  for note in notes:
    logging.info(note)
  return jax.tree.map(lambda value, init: np.asarray(value).astype(init.dtype),
                      flax.traverse_util.unflatten_dict(fitted),
                      flax.core.unfreeze(fresh))


def vit_architecture(params: Mapping[str, Any]) -> dict | None:
  """A ViT's registry fields from its shapes; None for another model."""
  official = jax.eval_shape(unstack_blocks, params)
  shapes = _shapes(official, 'the parameters')
  if (norm := names.path(names.ENCODER_NORM_SCALE)) not in shapes:
    return None
  block = f'{names.ENCODER}/{names.block_name(0)}/'
  query = shapes.get(f'{block}{names.ATTENTION}/query/kernel')
  mlp = shapes.get(f'{block}{names.MLP}/Dense_0/kernel')
  patch = shapes.get(f'{names.PATCH_EMBEDDING}/kernel', ())
  root = shapes.get(_ROOT)  # a hybrid's ResNet stem
  return dict(
      hidden_size=shapes[norm][0],
      num_layers=sum(
          name.startswith(names.BLOCK_PREFIX)
          for name in official[names.ENCODER]),
      num_heads=query[1] if query else None,
      mlp_dim=mlp[1] if mlp else None,
      # Not a shifted-patch embedding's Dense.
      patch_size=patch[0] if len(patch) == 4 else None,
      resnet_stages=root and stage_units(shapes, UNIT, 1),
      resnet_width_factor=root and stem_width_factor(root[-1], _ROOT))


def stem_width_factor(root_width: int, where: str) -> int:
  """The width factor of a hybrid whose ResNet root has `root_width`."""
  if root_width < 64 or root_width % 64:
    raise CheckpointError(
        f'{where} has {root_width} output channels; the ResNet stem of the '
        'official hybrid has 64 per unit of width factor (64, 128, ...).')
  return root_width // 64


def stage_units(keys, unit: re.Pattern, first: int) -> tuple[int, ...]:
  """Units per stage of the `keys` `unit` matches, numbered from `first`."""
  units = {}
  for match in filter(None, map(unit.match, keys)):
    stage = int(match[1])
    units[stage] = max(units.get(stage, 0), int(match[2]) + 1 - first)
  return tuple(units[stage] for stage in sorted(units))


def describe_architecture(architecture: dict) -> str:
  """`vit_architecture`'s result in words."""
  layers = architecture['num_layers']
  parts = [
      f'hidden size {architecture["hidden_size"]}',
      f'{layers} layer{"" if layers == 1 else "s"} of '
      f'{architecture["num_heads"]} heads', f'MLP {architecture["mlp_dim"]}'
  ]
  patch = architecture['patch_size']  # None: a shifted-patch embedding
  parts.append(f'patch {patch}x{patch}' if patch else 'shifted patches')
  stages = architecture['resnet_stages']
  stem = '' if stages is None else (
      f' on a ResNet stem of stages {stages}, width factor '
      f'{architecture["resnet_width_factor"]}')
  return f'a ViT{stem} with {", ".join(parts)}'
