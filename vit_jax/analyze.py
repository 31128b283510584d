r"""Figures of what a trained ViT learned, from a run's checkpoint.

  python -m vit_jax.analyze --workdir=/tmp/vit_tiny --out=/tmp/vit_tiny/analysis

Loads config.json and the latest checkpoint of a `vit_jax.main` run (any ViT
variant and image size), runs test images of the run's dataset through the
model and writes into --out (the analyses are in `vit_jax.analysis`):

  cls_attention.png          the class token's last-layer attention over the
                             patches, per head, for --num_images test images
  attention_rollout.png      attention rollout through all layers, same images
  attention_distance.png     mean attention distance of every head against
                             depth, over --distance_images test images
  position_embeddings.png    cosine similarity of each position's embedding to
                             all others (a grid of grids), and to the centre
  embedding_filters.png      top principal components of the patch-embedding
                             filters, as RGB patches (not for hybrids)
  analysis.json              the numbers behind the figures
"""

import json
import pathlib

from absl import app
from absl import flags
import jax
import numpy as np

from vit_jax import analysis
from vit_jax import checkpoint
from vit_jax import config_schema
from vit_jax import data
from vit_jax import models
from vit_jax import steps
from vit_jax.data import preprocess
from vit_jax.data import sources

_WORKDIR = flags.DEFINE_string('workdir', None, 'A vit_jax.main run.')
_OUT = flags.DEFINE_string('out', None, 'Where figures and analysis.json go.')
_STEP = flags.DEFINE_integer('step', None,
                             'Checkpoint to analyse (default: the latest).')
_DATA_DIR = flags.DEFINE_string(
    'data_dir', None, "The run's dataset directory, if it moved since.")
_NUM_IMAGES = flags.DEFINE_integer('num_images', 4,
                                   'Test images shown in the attention maps.')
_DISTANCE_IMAGES = flags.DEFINE_integer(
    'distance_images', 512, 'Test images the attention distances average.')
_COMPONENTS = flags.DEFINE_integer(
    'components', 28, 'Principal components of the embedding filters shown.')
flags.mark_flags_as_required(['workdir', 'out'])

_BATCH_SIZE = 64


class AnalysisError(ValueError):
  """The run cannot be analysed as asked."""


def _plt():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def _test_images(config, count: int) -> tuple[np.ndarray, np.ndarray]:
  """The first `count` test images: normalised model inputs and, for
  display, RGB in [0, 1] at the model's resolution."""
  test = sources.open_dataset(
      config, whole=config.input_pipeline == 'on_device').test
  images, _ = sources.to_arrays(sources.first(test, min(count, len(test)),
                                              'test_examples'),
                                config.image_size)
  if config.input_pipeline == 'streaming':  # resized on the host, as it trained
    images = np.stack([preprocess.resize(image, config.image_size)
                       for image in images])
  inputs = preprocess.normalize(
      images, key=None, augment=False, image_size=config.image_size,
      mean=config.pixel_mean, std=config.pixel_std)
  display = np.asarray(inputs) * np.asarray(config.pixel_std) + np.asarray(
      config.pixel_mean)
  return np.asarray(inputs), np.clip(display, 0, 1)


def attention_maps(model, variables, inputs: np.ndarray) -> list[np.ndarray]:
  """Every layer's attention for `inputs`, computed in batches."""
  attend = jax.jit(lambda x: models.attention_weights(model, variables, x))
  per_batch = [
      [np.asarray(a) for a in attend(inputs[i:i + _BATCH_SIZE])]
      for i in range(0, len(inputs), _BATCH_SIZE)
  ]
  return [np.concatenate(layer) for layer in zip(*per_batch)]


def _upsample(grid_map: np.ndarray, image_size: int) -> np.ndarray:
  factor = image_size // grid_map.shape[0]
  return np.kron(grid_map, np.ones((factor, factor)))


def plot_cls_attention(path, display, maps):
  plt = _plt()
  num_images, heads = maps.shape[:2]
  fig, axes = plt.subplots(num_images, heads + 1,
                           figsize=(1.6 * (heads + 1), 1.6 * num_images),
                           squeeze=False)
  for i in range(num_images):
    axes[i, 0].imshow(display[i])
    for h in range(heads):
      axes[i, h + 1].imshow(maps[i, h], cmap='inferno')
      if i == 0:
        axes[i, h + 1].set_title(f'head {h + 1}', fontsize=9)
  for ax in axes.ravel():
    ax.axis('off')
  fig.suptitle('last layer: attention of the class token to each patch')
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def plot_rollout(path, display, rollout_maps):
  plt = _plt()
  num_images = len(rollout_maps)
  fig, axes = plt.subplots(num_images, 3, figsize=(5, 1.7 * num_images),
                           squeeze=False)
  for i in range(num_images):
    heat = _upsample(rollout_maps[i] / rollout_maps[i].max(),
                     display.shape[1])
    axes[i, 0].imshow(display[i])
    axes[i, 1].imshow(rollout_maps[i], cmap='inferno')
    axes[i, 2].imshow(display[i] * heat[..., None])
  for ax, title in zip(axes[0], ('image', 'rollout', 'image x rollout')):
    ax.set_title(title, fontsize=9)
  for ax in axes.ravel():
    ax.axis('off')
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def plot_attention_distance(path, distances: np.ndarray, image_size: int,
                            uniform: float):
  plt = _plt()
  fig, ax = plt.subplots(figsize=(4.5, 3.5))
  layers, heads = distances.shape
  for h in range(heads):
    ax.scatter(np.arange(1, layers + 1), distances[:, h], s=14,
               label=f'head {h + 1}')
  ax.plot(np.arange(1, layers + 1), distances.mean(axis=1), 'k-', lw=1,
          label='mean')
  ax.axhline(uniform, color='gray', linestyle=':', label='uniform attention')
  ax.set_xlabel('network depth (layer)')
  ax.set_ylabel('mean attention distance (pixels)')
  ax.set_ylim(0, image_size)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=6, ncol=2)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def _mosaic(similarity: np.ndarray) -> np.ndarray:
  """(h, w, h, w) -> one image of h x w tiles, a NaN gap between tiles."""
  h, w = similarity.shape[:2]
  tiles = np.full((h, w, h + 1, w + 1), np.nan)
  tiles[:, :, :h, :w] = similarity
  return tiles.transpose(0, 2, 1, 3).reshape(h * (h + 1), w * (w + 1))


def plot_position_embeddings(path, similarity: np.ndarray, correlation: float):
  plt = _plt()
  fig, axes = plt.subplots(1, 2, figsize=(9, 4.3),
                           gridspec_kw={'width_ratios': [1.4, 1]})
  image = axes[0].imshow(_mosaic(similarity), cmap='viridis', vmin=-1, vmax=1)
  axes[0].set_title('each position vs all (tile = position)', fontsize=9)
  axes[1].imshow(analysis.similarity_to_centre(similarity), cmap='viridis',
                 vmin=-1, vmax=1)
  axes[1].set_title(f'similarity to the centre patch\n'
                    f'corr(similarity, grid distance) = {correlation:.2f}',
                    fontsize=9)
  for ax in axes:
    ax.set_xticks([])
    ax.set_yticks([])
  fig.colorbar(image, ax=axes, shrink=0.8, label='cosine similarity')
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot_embedding_filters(path, components: np.ndarray,
                           explained: np.ndarray):
  plt = _plt()
  columns = 7
  rows = -(-len(components) // columns)
  fig, axes = plt.subplots(rows, columns, figsize=(1.3 * columns, 1.4 * rows),
                           squeeze=False)
  for ax in axes.ravel():
    ax.axis('off')
  for ax, component, share in zip(axes.ravel(), components, explained):
    low, high = component.min(), component.max()
    ax.imshow((component - low) / (high - low + 1e-12))
    ax.set_title(f'{100 * share:.1f}%', fontsize=7)
  fig.suptitle('principal components of the patch-embedding filters '
               '(share of variance)', fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def analyze(workdir, out, *, step=None, data_dir=None, num_images=4,
            distance_images=512, components=28) -> dict:
  """Writes the figures and analysis.json of a run into `out`; returns the
  numbers."""
  run = checkpoint.load_run(workdir, step)
  config = run.config
  if data_dir:
    config.data_dir = data_dir
  num_classes = run.params['head']['kernel'].shape[-1]
  model = steps.create_model(config, num_classes)
  if not isinstance(model, models.VisionTransformer):
    raise AnalysisError(f'{workdir} trained {config.model}; the analyses need '
                        'a ViT run.')
  patch_size = model.effective_patch_size  # image pixels per token side
  grid = (config.image_size // patch_size,) * 2
  has_cls = model.classifier == 'token'

  inputs, display = _test_images(config, max(num_images, distance_images))
  attentions = attention_maps(model, run.variables, inputs)
  shown = slice(0, num_images)
  # The distances of 'gap' models' heads still use patch-to-patch attention.
  distances = np.stack([
      analysis.mean_attention_distance(a, grid, patch_size)
      for a in attentions
  ])
  similarity = analysis.position_embedding_similarity(
      run.params['Transformer']['posembed_input']['pos_embedding'], grid)
  correlation = analysis.similarity_distance_correlation(similarity)
  # A hybrid's embedding filters see ResNet features, not RGB pixels.
  rgb_filters = model.resnet_stages is None
  if rgb_filters:
    filters, explained = analysis.patch_embedding_components(
        run.params['embedding']['kernel'], components)

  out = pathlib.Path(out)
  out.mkdir(parents=True, exist_ok=True)
  if has_cls:
    plot_cls_attention(out / 'cls_attention.png', display[shown],
                       analysis.cls_attention(attentions[-1][shown], grid))
    rollout = analysis.attention_rollout([a[shown] for a in attentions])
    plot_rollout(out / 'attention_rollout.png', display[shown],
                 rollout[:, 0, 1:].reshape(-1, *grid))
  uniform = analysis.uniform_attention_distance(grid, patch_size)
  plot_attention_distance(out / 'attention_distance.png', distances,
                          config.image_size, uniform)
  plot_position_embeddings(out / 'position_embeddings.png', similarity,
                           correlation)
  if rgb_filters:
    plot_embedding_filters(out / 'embedding_filters.png', filters, explained)

  result = {
      'workdir': str(workdir),
      'step': run.step,
      'model': config.model,
      'image_size': config.image_size,
      'patch_size': patch_size,
      'grid': list(grid),
      'distance_images': len(inputs),
      'mean_attention_distance_per_head': distances.round(3).tolist(),
      'mean_attention_distance_per_layer': distances.mean(1).round(3).tolist(),
      'uniform_attention_distance': round(uniform, 3),
      'position_similarity_distance_correlation': round(correlation, 4),
  }
  if rgb_filters:
    result['embedding_filter_explained_variance'] = explained.round(
        4).tolist()
  (out / 'analysis.json').write_text(json.dumps(result, indent=1) + '\n')
  return result


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  try:
    result = analyze(
        _WORKDIR.value, _OUT.value, step=_STEP.value,
        data_dir=_DATA_DIR.value, num_images=_NUM_IMAGES.value,
        distance_images=_DISTANCE_IMAGES.value, components=_COMPONENTS.value)
  except (checkpoint.CheckpointError, AnalysisError, config_schema.ConfigError,
          data.DatasetError) as e:
    raise SystemExit(f'error: {e}') from None
  print(json.dumps(result))


if __name__ == '__main__':
  app.run(main)
