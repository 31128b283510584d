"""Our tree as timm's or transformers' state dict, and back."""

import pathlib
import re
from typing import Callable

from absl import logging

import jax

from vit_jax import models
from vit_jax.errors import CheckpointError
from vit_jax.formats import params as params_lib
from vit_jax.formats import safetensors_file
from vit_jax.formats import vit_model
from vit_jax.models import names
from vit_jax.runtime import files

# The name of an array of one of our modules in theirs.
_ARRAYS = {'kernel': 'weight', 'scale': 'weight', 'bias': 'bias'}
_OUR_BLOCK = re.compile(rf'{names.ENCODER}/{names.BLOCK_PREFIX}(\d+)/(.+)')
POSITIONS = names.path(names.POSITION_EMBEDDING_TABLE)
ATTENTION = names.ATTENTION + '/'  # a block's attention's modules

# Their name of one of our modules, or of an array of none ('cls').
Names = Callable[[str], str]


def module_name(module: str, top: dict[str, str], block: dict[str, str],
                block_prefix: str) -> str:
  """`top`'s name of `module`; in block i, `block_prefix` of i + `block`'s."""
  match = _OUR_BLOCK.fullmatch(module)
  return block_prefix.format(match[1]) + block[match[2]] if match else (
      top[module])


def their_key(key: str, name: Names) -> str:
  """Their name of our array `key`."""
  module, _, array = key.rpartition('/')
  return f'{name(module)}.{_ARRAYS[array]}' if array in _ARRAYS else name(key)


def _theirs(key: str, array):
  """Our array as PyTorch's: (out, in[, h, w]) kernels, attention heads flat."""
  if key.endswith('/bias'):
    return array.reshape(-1)
  if not key.endswith('/kernel'):
    return array
  if array.ndim == 4:
    return array.transpose(3, 2, 0, 1)
  # The attention's output projection has its heads on the input side.
  return (array.reshape(-1, array.shape[-1]).T if key.endswith('/out/kernel')
          else array.reshape(array.shape[0], -1).T)


def _ours(key: str, array, shape: tuple[int, ...]):
  """The inverse of `_theirs` for an array of our `shape`."""
  if key.endswith('/kernel') and len(shape) == 4:
    return array.transpose(2, 3, 1, 0)
  return (array.T if key.endswith('/kernel') else array).reshape(shape)


def to_state(params: dict, name: Names) -> dict:
  """Our tree (either block layout) as their state dict."""
  flat = params_lib.flatten(params_lib.unstack_blocks(params), 'the parameters')
  return {their_key(k, name): _theirs(k, v) for k, v in flat.items()}


def from_state(state: dict, expected: dict, name: Names) -> dict:
  """Their checked state dict as our tree of `expected`'s shapes."""
  ours = {}
  for key, shape in params_lib.flatten(expected, 'the model').items():
    if (theirs := their_key(key, name)) in state:
      ours[key] = _ours(key, state[theirs], shape.shape)
  return params_lib.unflatten(ours, 'the model')


def expected_shapes(state: dict, name: Names, layer: re.Pattern,
                    to_theirs: Callable[[dict], dict], *, library: str,
                    layout: str, model_name: str | None, stated: dict[str, str],
                    config: dict, source: str, **fields) -> dict:
  """Our shapes of the ViT in `state`, checked as `to_theirs` lays them out."""
  mlp = f'{names.ENCODER}/{names.block_name(0)}/{names.MLP}/Dense_0/kernel'
  norm = names.path(names.ENCODER_NORM_SCALE)
  required = [POSITIONS, 'embedding/kernel', norm, mlp]
  if fields.get('classifier', 'token') == 'token':
    required.append(names.CLASS_TOKEN)
  # The head is optional: a backbone's state has none.
  optional = ['head/kernel', 'head/bias']
  theirs = {ours: their_key(ours, name) for ours in [*required, *optional]}
  for ours in required:
    if theirs[ours] not in state:
      raise CheckpointError(f'{source} is not a {library} ViT: it has no '
                            f'{theirs[ours]}.')
  width = state[theirs[POSITIONS]].shape[-1]
  heads_name = stated['num_heads']
  given = config.get(heads_name)
  if given is not None and (type(given) is not int or given < 1):
    raise CheckpointError(f'{source} says {heads_name}={given!r}, which is no '
                          f'number of heads; fix {heads_name} in its '
                          'config.json.')
  heads = vit_model.num_heads(width, model_name=model_name, stated=given,
                              source=source)
  if width % heads:
    raise CheckpointError(
        f'{source} says {heads_name}={heads}, which does not divide the '
        f"width of its weights ({width}); fix {heads_name} in its config.json.")
  head = state.get(theirs['head/kernel'])
  model = models.VisionTransformer(
      num_classes=1 if head is None else head.shape[0],
      patch_size=state[theirs['embedding/kernel']].shape[-1], hidden_size=width,
      num_layers=1 +
      max(int(match[1]) for match in map(layer.match, state) if match),
      num_heads=heads, mlp_dim=state[theirs[mlp]].shape[0], **fields)
  for field, their_name in stated.items():
    value = config.get(their_name)
    if value is not None and value != getattr(model, field):
      logging.warning(
          '%s says %s=%s, but its weights have %s=%s: the weights decide.',
          source, their_name, value, their_name, getattr(model, field))
  image_size = vit_model.table_image_size(state[theirs[POSITIONS]].shape[1],
                                          model, source, theirs[POSITIONS])
  shapes = params_lib.param_shapes(model, image_size)
  expected = {
      key: value for key, value in jax.eval_shape(to_theirs, shapes).items()
      if key in state or key not in [theirs[ours] for ours in optional]
  }
  described = params_lib.describe_architecture(
      params_lib.vit_architecture(shapes))
  params_lib.check_params(state, expected, source=source,
                          target=f'{layout} of {described}')
  return shapes


def _check_square(config: dict, source: pathlib.Path) -> None:
  """One line if timm's or transformers' config.json says non-square images."""
  # timm builds model_args' img_size, else pretrained_cfg's input_size; an
  # n x n grid of patches would hold the n*n of another shape's.
  timm = config.get('pretrained_cfg', config)
  size = ((config.get('model_args') or {}).get('img_size') or
          config.get('image_size') or
          (isinstance(timm, dict) and timm.get('input_size')))
  if isinstance(size, list) and len(set(size[-2:])) > 1:
    raise CheckpointError(f'{source} says its images are {size[-2]}x{size[-1]}'
                          ': only ViTs of square images read in.')


def read_weights(path: pathlib.Path) -> tuple[dict | None, pathlib.Path, dict]:
  """The config.json (or None), weights path and arrays of a folder or file."""
  path = pathlib.Path(path)
  config = vit_model.folder_config(path, 'config.json')
  _check_square(config or {}, path / 'config.json')
  if path.is_dir():
    path = path / safetensors_file.WEIGHTS_NAME
  return config, path, safetensors_file.read(path)


def write_folder(directory: pathlib.Path, state: dict, configs: dict[str, dict],
                 metadata: dict[str, str] | None = None) -> None:
  """The weights and each of `configs` (file name: JSON) in `directory`."""
  directory = pathlib.Path(directory)
  safetensors_file.write(directory / safetensors_file.WEIGHTS_NAME, state,
                         metadata=metadata)
  for file_name, config in configs.items():
    files.write_json(directory / file_name, config, indent=2)
