"""The ViT a tree of parameters is, and what another library's can hold."""

from collections.abc import Mapping
import json
import math
import pathlib
from typing import Any

from vit_jax import models
from vit_jax.errors import CheckpointError
from vit_jax.formats import params as params_lib
from vit_jax.models import names

# The released models' pixels in [-1, 1], for a checkpoint that states none.
RELEASED_PIXELS = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def folder_config(path: pathlib.Path, name: str) -> dict | None:
  """The JSON object `name` in the checkpoint folder `path`, or None."""
  if not (config_file := pathlib.Path(path) / name).is_file():
    return None
  try:
    config = json.loads(config_file.read_text())
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise CheckpointError(f'{config_file} is not valid JSON: {e}.') from e
  if not isinstance(config, dict):
    raise CheckpointError(f'{config_file} holds a {type(config).__name__}, '
                          'not a JSON object.')
  return config


def _per_channel(value: Any) -> tuple[float, ...] | None:
  """3 floats from 3 numbers or one."""
  try:
    values = (float(value),) * 3 if isinstance(value, (int, float)) else tuple(
        float(x) for x in value)
  except (TypeError, ValueError):
    return None
  return values if len(values) == 3 and all(map(math.isfinite, values)) else (
      None)


def checked_pixels(mean: Any, std: Any, source: str,
                   default: tuple[tuple, tuple]) -> tuple[tuple, tuple]:
  """The (mean, std) a checkpoint's config states, else `default`."""
  pixels = (default[0] if mean is None else _per_channel(mean),
            default[1] if std is None else _per_channel(std))
  if None in pixels or not all(s > 0 for s in pixels[1]):
    raise CheckpointError(f'{source} states the pixel mean {mean!r} and std '
                          f'{std!r}: each must be 3 finite numbers (or one), '
                          'the std positive; fix the file or remove both.')
  return pixels


def _vit_fields(model_name: str) -> dict:
  if model_name not in models.VIT_FIELDS:
    raise CheckpointError(f'--model={model_name} is not a ViT; pass one of '
                          f'{", ".join(models.VIT_FIELDS)}.')
  return models.VIT_FIELDS[model_name]


def num_heads(hidden_size: int, *, model_name: str | None, stated: int | None,
              source: str) -> int:
  """The heads `stated`, else `--model`'s, else the registered ViTs' width's."""
  if stated:
    return stated
  if model_name:
    return _vit_fields(model_name)['num_heads']
  vits = models.VIT_FIELDS.values()
  heads = {f['num_heads'] for f in vits if f['hidden_size'] == hidden_size}
  if len(heads) != 1:
    raise CheckpointError(
        f'{source} has hidden size {hidden_size}, which no registered ViT '
        'has, and does not say its number of heads: keep the config.json '
        'that came with it, which says them.')
  return heads.pop()


def _head_fields(params: Mapping[str, Any], source: str) -> dict:
  """The VisionTransformer fields the parameters beside the encoder tell."""
  if names.HEAD not in params:
    raise CheckpointError(f'{source} has no classification head (head/kernel): '
                          'a backbone alone cannot be evaluated or converted; '
                          'fine-tune it with config.init_from.')
  return dict(
      classifier=('token' if names.CLASS_TOKEN in params else
                  'map' if names.MAP_HEAD in params else 'gap'),
      representation_size=(params[names.PRE_LOGITS]['bias'].shape[0]
                           if names.PRE_LOGITS in params else None),
      distillation_token=names.DISTILLATION_TOKEN in params,
      num_classes=params[names.HEAD]['bias'].shape[0])


def model_for(params: Mapping[str, Any], *, model_name: str | None = None,
              source: str) -> tuple[models.VisionTransformer, int]:
  """The ViT that applies `params`, `model_name`'s if given; its image size."""
  if (architecture := params_lib.vit_architecture(params)) is None:
    raise CheckpointError(f'{source} holds no ViT: it has no '
                          f'{names.path(names.ENCODER_NORM_SCALE)}.')
  fields = _head_fields(params, source)
  if name := model_name or models.vit_of_architecture(architecture):
    _vit_fields(name)
    model = models.create_model(name, **fields)
    named = params_lib.vit_architecture(
        params_lib.param_shapes(model, model.effective_patch_size))
    if named != architecture:
      found = models.vit_of_architecture(architecture)
      raise CheckpointError(
          f'{source} holds {params_lib.describe_architecture(architecture)}'
          f'{f" ({found})" if found else ""}, but --model={name} is '
          f'{params_lib.describe_architecture(named)}: leave out --model, '
          'or pass the checkpoint of that model.')
  elif architecture['patch_size'] is None:
    raise CheckpointError(
        f'{source} holds {params_lib.describe_architecture(architecture)} '
        'that is not a registered model: pass --model=NAME.')
  else:
    # The architecture's fields; a plain ViT's stem ones (None) as default,
    # and placeholders for arrays block 0 lacks, which check_params names.
    stated = {k: v for k, v in architecture.items() if v is not None}
    stated = dict(num_heads=1, mlp_dim=1) | stated
    model = models.VisionTransformer(**stated, **fields)
  image_size = _image_size(params, model, source)
  params_lib.check_params(
      params, params_lib.param_shapes(model, image_size), source=source,
      target=f'{name or "the ViT"} at {image_size}x{image_size}')
  return model, image_size


def table_image_size(num_tokens: int, model: models.VisionTransformer,
                     source: str, table: str) -> int:
  """`model`'s image side for a position table of a square patch grid."""
  prefix = len(model.prefix_tokens)
  patches = num_tokens - prefix
  side = math.isqrt(max(patches, 0))
  if side * side != patches:
    raise CheckpointError(f'{source} has {table} for {patches} patches '
                          f'and {prefix} prefix token(s): not a square grid.')
  return side * model.effective_patch_size


def _image_size(params, model: models.VisionTransformer, source: str) -> int:
  encoder, embedding, table = names.POSITION_EMBEDDING_TABLE
  if (table := params.get(encoder, {}).get(embedding, {}).get(table)) is None:
    raise CheckpointError(
        f'{source} has no learned position embeddings '
        f'({names.path(names.POSITION_EMBEDDING_TABLE)}), so nothing tells '
        "its image size: evaluate it from its run's workdir.")
  return table_image_size(table.shape[1], model, source, 'position embeddings')


def npz_lacks(model: models.VisionTransformer) -> dict[str, bool]:
  """What no array of the official .npz says: no reader could rebuild it."""
  return {
      'shifted-patch embedding': model.shifted_patches,
      'locality self-attention': model.locality_attention,
      f'position embedding {model.posemb!r}': model.posemb != 'learned'
  }


def folder_lacks(model: models.VisionTransformer) -> dict[str, bool]:
  """What neither timm's nor transformers' ViT holds."""
  return {
      'MAP head': model.classifier == 'map',
      'distillation token': model.distillation_token,
      **npz_lacks(model), 'pre-logits layer (representation_size)':
          model.representation_size is not None
  }


def check_exportable(model: models.VisionTransformer, format_name: str,
                     unsupported: dict[str, bool]) -> None:
  """CheckpointError naming the first feature of `unsupported` `model` has."""
  fix = ('keep its workdir, which every command reads' if any(
      npz_lacks(model).values()) else 'convert it with --format=npz')
  for feature, present in unsupported.items():
    if present:
      raise CheckpointError(
          f'{format_name} has no {feature}, which this ViT has: {fix}.')
