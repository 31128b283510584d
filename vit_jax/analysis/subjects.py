"""What `python -m vit_jax.analyze` analyzes: a ViT, images, its attention."""

import pathlib

import jax
from absl import logging
import numpy as np

from vit_jax import models
from vit_jax.analysis import measures
from vit_jax.checkpoints import reading
from vit_jax.data import preprocess
from vit_jax.data import sources
from vit_jax.errors import AnalysisError
from vit_jax.formats import params as params_lib
from vit_jax.models import names
from vit_jax.models.layers import position
from vit_jax.runtime import files

# Images per forward pass, fewer where their attention maps (every layer's)
# would pass _BATCH_BYTES.
_BATCH_SIZE, _BATCH_BYTES = 64, 2**30
# Compiled once per model; the variables are an argument, not constants.
_logits_and_attention = jax.jit(models.logits_and_attention, static_argnums=0)


def grid(subject: reading.Loaded) -> tuple[int, int]:
  """The patch grid (a hybrid's tokens are larger than its patches)."""
  return (subject.image_size // subject.model.effective_patch_size,) * 2


def load(source, model_name: str | None = None,
         step: int | None = None) -> tuple[reading.Loaded, dict]:
  """The ViT of any checkpoint, and what analysis.json says of it."""
  loaded = reading.load(source, model_name=model_name, step=step)
  if not isinstance(loaded.model, models.VisionTransformer):  # a run's CNN
    raise AnalysisError(f'{source} trained {loaded.config.model}; the '
                        'analyses need a ViT run.')
  if loaded.config is None:
    return loaded, dict(
        checkpoint=str(source), format=loaded.kind, model=model_name or
        models.vit_of_architecture(params_lib.vit_architecture(loaded.params)))
  return loaded, dict(workdir=str(source), step=loaded.step,
                      model=loaded.config.model)


def image_files(specs: list[str]) -> list[pathlib.Path]:
  """The image files named, and those in the directories named, sorted."""
  found = []
  for spec in specs:
    path = pathlib.Path(spec).expanduser()
    if path.is_dir():
      inside = sorted(p for p in path.rglob('*') if p.is_file() and not any(
          part.startswith('.') for part in p.relative_to(path).parts))
      images = [p for p in inside if files.is_image_file(p)]
      if skipped := sorted(set(inside) - set(images)):
        logging.warning('--images: skipped %s, not %s images.',
                        ', '.join(map(str, skipped)), files.IMAGE_TYPES)
      found += images
    elif path.is_file():
      found.append(path)
    else:
      raise AnalysisError(f'--images: {path} does not exist.')
  if not found:
    raise AnalysisError(f'--images={",".join(specs)} holds no '
                        f'{files.IMAGE_TYPES} file.')
  return found


def _resized(images, size: int) -> np.ndarray:
  return np.stack([preprocess.resize(image, size) for image in images])


def read_images(paths: list[pathlib.Path], image_size: int) -> np.ndarray:
  """The image files as uint8, resized to `image_size`."""
  return _resized(map(sources.read_image, paths), image_size)


def run_test_images(config, count: int) -> np.ndarray:
  """`count` test images of a run's dataset, uint8 at the model's size."""
  on_device = config.input_pipeline == 'on_device'
  dataset = sources.open_dataset(config, whole=on_device)
  images, _ = sources.to_arrays(
      sources.subset(dataset, 'test', min(count, len(dataset.test)),
                     config.seed), config.image_size)
  # Streamed images are resized on the host, as the run trained on them.
  return images if on_device else _resized(images, config.image_size)


def read_class_names(path, subject: reading.Loaded) -> list[str]:
  """The class names in a text file, one a line, one per class."""
  try:
    class_names = pathlib.Path(path).read_text().splitlines()
  except (OSError, UnicodeDecodeError) as e:
    problem = e.strerror if isinstance(e, OSError) else 'not UTF-8 text'
    raise AnalysisError(f'--class_names={path}: {problem}; pass a text '
                        'file of the class names, one a line.') from e
  classes = subject.params[names.HEAD]['kernel'].shape[-1]
  if len(class_names) != classes:
    raise AnalysisError(f'--class_names={path} has {len(class_names)} lines; '
                        f'the model has {classes} classes.')
  return class_names


def model_inputs(images: np.ndarray,
                 subject: reading.Loaded) -> tuple[np.ndarray, np.ndarray]:
  """Normalized model inputs of uint8 images, and the same in [0, 1]."""
  mean, std = subject.pixels
  inputs = np.asarray(
      preprocess.eval_input(images, image_size=subject.image_size, mean=mean,
                            std=std))
  return inputs, np.clip(inputs * np.asarray(std) + np.asarray(mean), 0, 1)


def forward(model, variables, inputs: np.ndarray, keep: int | None = None,
            each_batch=None):
  """Logits, the first `keep`'s attention; `each_batch` sees every batch's."""
  tokens = ((inputs.shape[1] // model.effective_patch_size)**2 +
            len(model.prefix_tokens))
  image_bytes = model.num_layers * model.num_heads * tokens**2 * 4
  size = max(1, min(_BATCH_SIZE, _BATCH_BYTES // image_bytes))
  keep = len(inputs) if keep is None else keep
  logits, kept = [], []
  for i in range(0, len(inputs), size):
    batch_logits, attention = jax.device_get(
        _logits_and_attention(model, variables, inputs[i:i + size]))
    if each_batch:
      each_batch(attention)
    logits.append(batch_logits)
    kept.append([a[:max(keep - i, 0)] for a in attention])
  return np.concatenate(logits), [np.concatenate(a) for a in zip(*kept)]


def top5(logits: np.ndarray, names: list[str] | None) -> list[list]:
  """Per image, the 5 likeliest classes and their probabilities."""
  probabilities = np.asarray(jax.nn.softmax(logits))
  best = np.argsort(-probabilities, axis=1)[:, :5]
  return [[[names[c] if names else int(c),
            round(float(p[c]), 4)] for c in row]
          for p, row in zip(probabilities, best)]


def position_table(model: models.VisionTransformer, params,
                   grid: tuple[int, int]) -> np.ndarray | None:
  """The position embedding the model adds, learned or fixed, or None."""
  if model.posemb == 'learned':
    encoder, embedding, table = names.POSITION_EMBEDDING_TABLE
    return params[encoder][embedding][table]
  return (np.asarray(position.posemb_sincos_2d(*grid, model.hidden_size))
          if model.posemb == 'sincos2d' else None)


def embedding_filters(model: models.VisionTransformer,
                      params) -> tuple[np.ndarray | None, str]:
  """The patch-embedding filters on RGB pixels and a title, or None and why."""
  if model.resnet_stages is not None:
    return None, "a hybrid's patch embedding sees ResNet features, not pixels"
  if model.shifted_patches:
    return measures.shifted_patch_filters(
        params[names.SHIFTED_PATCH_EMBEDDING]['kernel'], model.patch_size,
        params[names.SHIFTED_PATCH_NORM]['scale']
    ), ("the shifted-patch projection's filters\non the unshifted patch (its"
        " slice of shifted_patch_embedding x the shifted_patch_norm scale)")
  return params[names.PATCH_EMBEDDING]['kernel'], 'the patch-embedding filters'
