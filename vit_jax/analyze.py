r"""Figures of what a ViT learned: from a run's checkpoint, or from a
released `.npz`, on the run's test images or on your own.

  python -m vit_jax.analyze --workdir=/tmp/vit_tiny --out=/tmp/vit_tiny/analysis
  python -m vit_jax.analyze --checkpoint=ViT-B_16.npz --model=ViT-B_16 \
      --images=photos/ --class_names=imagenet21k_classes.txt --out=/tmp/b16

A run: its config.json and latest checkpoint (or --step), any ViT variant
and image size, and its dataset's test images unless --images is given. A
released `.npz` (google-research/vision_transformer's layout): --model names
its architecture; the image size follows from its position embeddings, and
images are resized and scaled to [-1, 1] as the released models expect.
Writes into --out (the analyses are in `vit_jax.analysis`):

  cls_attention.png          the class token's last-layer attention over the
                             patches, per head, for --num_images images
  dist_attention.png         the same for DeiT's distillation token, when the
                             model has one
  attention_rollout.png      attention rollout through all layers, same images
                             (what flows into the class token)
  rollout_<image>.png        with --images: the rollout over each image
  attention_distance.png     mean attention distance of every head against
                             depth (the paper's Figure 7, right)
  position_embeddings.png    cosine similarity of each position's embedding to
                             all others, and to the centre (Figure 7, centre)
  embedding_filters.png      top principal components of the patch-embedding
                             filters, as RGB patches (Figure 7, left; not for
                             hybrids)
  analysis.json              the numbers behind the figures, and with
                             --images the top-5 classes of each image

Runs of `VisionTransformer`'s optional techniques are analysed as they are:
the patches are the tokens after the prefix ones ([CLS], then the
distillation token), and the image size and patch grid come from the run's
config. What a model does not have is not drawn, and the command says so in
one line each (analysis.json lists it under `not_drawn`, and has no numbers
for it; a figure of that name left in --out by an earlier analysis is
removed):

  classifier 'gap' or 'map'  no class token: no cls_attention.png nor
                             attention rollout
  posemb='sincos2d'          position_embeddings.png shows the fixed
                             sine-cosine embedding (`small_data.posemb_sincos_2d`),
                             titled as such; analysis.json's
                             `position_embedding` says which it was
  posemb='none'              no position_embeddings.png
  shifted_patches            embedding_filters.png shows the components of the
                             filters on the patch itself: the unshifted
                             image's slice of the `shifted_patch_embedding`
                             kernel, times the `shifted_patch_norm` scale
                             (`analysis.shifted_patch_filters`)
  locality_attention         the attention maps have a zero diagonal; the
                             uniform-attention distance leaves out the patch
                             itself

For a run, the figures also go to its TensorBoard (`tensorboard --logdir
WORKDIR/tensorboard`, under `analysis`), at the step analysed.
"""

import dataclasses
import json
import math
import pathlib

from absl import app
from absl import flags
from absl import logging
import jax
import numpy as np

from vit_jax import analysis
from vit_jax import checkpoint
from vit_jax import models
from vit_jax.data import preprocess
from vit_jax import errors
from vit_jax.errors import AnalysisError
from vit_jax.data import sources
from vit_jax.models import small_data

_WORKDIR = flags.DEFINE_string('workdir', None, 'A vit_jax.main run.')
_CHECKPOINT = flags.DEFINE_string(
    'checkpoint', None, 'A released .npz, instead of --workdir.')
_MODEL = flags.DEFINE_string(
    'model', None, "The --checkpoint's architecture, e.g. ViT-B_16.")
_IMAGES = flags.DEFINE_list(
    'images', None, "Image files or directories to analyse (default: the "
    "run's test images).")
_CLASS_NAMES = flags.DEFINE_string(
    'class_names', None, 'A text file of the class names, one per line, to '
    'name the top-5 predictions of --images.')
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
flags.mark_flags_as_required(['out'])

_BATCH_SIZE = 64




# The released models' preprocessing: pixels scaled to [-1, 1].
_RELEASED_MEAN = _RELEASED_STD = (0.5, 0.5, 0.5)


@dataclasses.dataclass(frozen=True)
class Subject:
  """A ViT to analyse, and how its input images are made."""
  model: models.VisionTransformer
  variables: dict
  image_size: int
  pixel_mean: tuple
  pixel_std: tuple
  described: dict  # what analysis.json says was analysed


def run_subject(workdir, step=None) -> tuple[Subject, object]:
  """The ViT of a `vit_jax.main` run, and the run's config."""
  run = checkpoint.load_run(workdir, step)
  config = run.config
  model = models.from_config(config, run.params['head']['kernel'].shape[-1])
  if not isinstance(model, models.VisionTransformer):
    raise AnalysisError(f'{workdir} trained {config.model}; the analyses need '
                        'a ViT run.')
  return Subject(model, run.variables, config.image_size,
                 tuple(config.pixel_mean), tuple(config.pixel_std),
                 {'workdir': str(workdir), 'step': run.step,
                  'model': config.model}), config


def npz_subject(path, model_name: str) -> Subject:
  """The ViT of a released `.npz`, at the image size its position
  embeddings were trained for."""
  if not model_name:
    raise AnalysisError('--checkpoint needs --model: the architecture of the '
                        f'.npz, one of {", ".join(models.MODEL_NAMES)}.')
  params = checkpoint.load_npz(path)
  try:
    model = models.create_model(model_name,
                                params['head']['kernel'].shape[-1])
  except (ValueError, TypeError, KeyError) as e:
    raise AnalysisError(f'--model={model_name}: {e}') from e
  if not isinstance(model, models.VisionTransformer):
    raise AnalysisError(f'--model={model_name} is not a ViT.')
  positions = params['Transformer']['posembed_input']['pos_embedding']
  side = math.isqrt(positions.shape[1] - len(model.prefix_tokens))
  image_size = side * model.effective_patch_size
  checkpoint.check_params(params, checkpoint.param_shapes(model, image_size),
                          source=str(path),
                          target=f'{model_name} at {image_size}x{image_size}')
  return Subject(model, {'params': params}, image_size, _RELEASED_MEAN,
                 _RELEASED_STD, {'checkpoint': str(path), 'model': model_name})


def image_files(specs: list[str]) -> list[pathlib.Path]:
  """The image files named, and those in the directories named, sorted."""
  files = []
  for spec in specs:
    path = pathlib.Path(spec).expanduser()
    if path.is_dir():
      files += sorted(p for p in path.rglob('*')
                      if p.suffix.lower() in ('.jpg', '.jpeg', '.png'))
    elif path.is_file():
      files.append(path)
    else:
      raise AnalysisError(f'--images: {path} does not exist.')
  if not files:
    raise AnalysisError(f'--images={",".join(specs)} holds no .jpg, .jpeg or '
                        '.png file.')
  return files


def _model_inputs(images: np.ndarray, subject: Subject):
  """Normalised model inputs of uint8 images (resized to the model's size
  if they are not), and the same in [0, 1] for display."""
  inputs = np.asarray(preprocess.eval_input(
      images, image_size=subject.image_size, mean=subject.pixel_mean,
      std=subject.pixel_std))
  display = inputs * np.asarray(subject.pixel_std) + np.asarray(
      subject.pixel_mean)
  return inputs, np.clip(display, 0, 1)


def _plt():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def _test_images(config, count: int) -> np.ndarray:
  """The first `count` test images of a run's dataset, uint8 at the model's
  resolution."""
  test = sources.open_dataset(
      config, whole=config.input_pipeline == 'on_device').test
  images, _ = sources.to_arrays(sources.first(test, min(count, len(test)),
                                              'test_examples'),
                                config.image_size)
  if config.input_pipeline == 'streaming':  # resized on the host, as it trained
    images = np.stack([preprocess.resize(image, config.image_size)
                       for image in images])
  return images


def forward(model, variables, inputs: np.ndarray):
  """The logits of `inputs` and every layer's attention, in batches."""
  run = jax.jit(lambda x: models.logits_and_attention(model, variables, x))
  logits, attentions = [], []
  for i in range(0, len(inputs), _BATCH_SIZE):
    batch_logits, batch_attentions = run(inputs[i:i + _BATCH_SIZE])
    logits.append(np.asarray(batch_logits))
    attentions.append([np.asarray(a) for a in batch_attentions])
  return (np.concatenate(logits),
          [np.concatenate(layer) for layer in zip(*attentions)])


def top5(logits: np.ndarray, names: list[str] | None) -> list[list]:
  """Per image, the 5 likeliest classes (name or index) and their
  probabilities."""
  probabilities = np.asarray(jax.nn.softmax(logits))
  best = np.argsort(-probabilities, axis=1)[:, :5]
  return [[[names[c] if names else int(c), round(float(p[c]), 4)]
           for c in row] for p, row in zip(probabilities, best)]


def _upsample(grid_map: np.ndarray, image_size: int) -> np.ndarray:
  factor = image_size // grid_map.shape[0]
  return np.kron(grid_map, np.ones((factor, factor)))


def plot_cls_attention(path, display, maps, token='class'):
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
  fig.suptitle(f'last layer: attention of the {token} token\nto each patch',
               fontsize=10)
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


def plot_position_embeddings(path, similarity: np.ndarray, correlation: float,
                             title: str | None = None):
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
  if title:
    fig.suptitle(title, fontsize=10)
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot_embedding_filters(path, components: np.ndarray,
                           explained: np.ndarray,
                           title: str = 'the patch-embedding filters'):
  """`title`: what the filters are, after 'principal components of'."""
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
  fig.suptitle(f'principal components of {title}\n(share of variance)',
               fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def position_table(model: models.VisionTransformer, params,
                   grid: tuple[int, int]) -> np.ndarray | None:
  """The position embedding the model adds, (1, tokens or h*w, d): its
  learned table, the fixed sine-cosine one of the grid, or None."""
  if model.posemb == 'learned':
    return params['Transformer']['posembed_input']['pos_embedding']
  if model.posemb == 'sincos2d':
    return np.asarray(small_data.posemb_sincos_2d(*grid, model.hidden_size))
  return None


def embedding_filters(model: models.VisionTransformer,
                      params) -> tuple[np.ndarray | None, str]:
  """The patch-embedding filters on RGB pixels, (p, p, channels, d), and
  what they are (a figure title); or None and why there are none."""
  if model.resnet_stages is not None:
    return None, ("a hybrid's patch embedding sees ResNet features, not "
                  'pixels')
  if model.shifted_patches:
    return analysis.shifted_patch_filters(
        params['shifted_patch_embedding']['kernel'], model.patch_size,
        params['shifted_patch_norm']['scale']), (
            "the shifted-patch projection's filters\non the unshifted patch "
            '(its slice of shifted_patch_embedding x the shifted_patch_norm '
            'scale)')
  return params['embedding']['kernel'], 'the patch-embedding filters'


def not_drawn_lines(result: dict) -> list[str]:
  """One line per reason a figure was not drawn: 'REASON: FIGURES not
  drawn'."""
  reasons = {}
  for figure, reason in result.get('not_drawn', {}).items():
    reasons.setdefault(reason, []).append(figure)
  return [f'{reason}: {", ".join(figures)} not drawn'
          for reason, figures in reasons.items()]


def analyze(out, *, workdir=None, step=None, data_dir=None,
            checkpoint_path=None, model_name=None, images=None,
            class_names=None, num_images=4, distance_images=512,
            components=28) -> dict:
  """Writes the figures and analysis.json into `out` for a run (`workdir`)
  or a released .npz (`checkpoint_path`, `model_name`), on the run's test
  images or on `images` (files or directories); returns the numbers."""
  if (workdir is None) == (checkpoint_path is None):
    raise AnalysisError('Pass --workdir (a run) or --checkpoint (a .npz).')
  if checkpoint_path is not None:
    subject = npz_subject(checkpoint_path, model_name)
    if not images:
      raise AnalysisError('--checkpoint needs --images: the images to look '
                          'at (files or directories).')
  else:
    subject, config = run_subject(workdir, step)
    if data_dir:
      config.data_dir = data_dir
  model, size = subject.model, subject.image_size
  files = image_files(images) if images else None
  if files:
    pixels = np.stack([preprocess.resize(sources.read_image(f), size)
                       for f in files])
  else:
    pixels = _test_images(config, max(num_images, distance_images))
  inputs, display = _model_inputs(pixels, subject)
  names = None
  if class_names:
    names = pathlib.Path(class_names).read_text().splitlines()
    classes = subject.variables['params']['head']['kernel'].shape[-1]
    if len(names) != classes:
      raise AnalysisError(f'--class_names={class_names} has {len(names)} '
                          f'lines; the model has {classes} classes.')

  patch_size = model.effective_patch_size  # image pixels per token side
  grid = (size // patch_size,) * 2
  prefix = list(model.prefix_tokens)
  logits, attentions = forward(model, subject.variables, inputs)
  shown = slice(0, num_images)
  not_drawn = {}  # figure -> why not
  # The distances of 'gap' models' heads still use patch-to-patch attention.
  distances = np.stack([
      analysis.mean_attention_distance(a, grid, patch_size, len(prefix))
      for a in attentions
  ])
  params = subject.variables['params']
  positions = position_table(model, params, grid)
  if positions is None:
    not_drawn['position_embeddings.png'] = (
        f"no position embedding (posemb='{model.posemb}')")
  else:
    similarity = analysis.position_embedding_similarity(positions, grid)
    correlation = analysis.similarity_distance_correlation(similarity)
  kernel, filters_title = embedding_filters(model, params)
  if kernel is None:
    not_drawn['embedding_filters.png'] = filters_title
  else:
    filters, explained = analysis.patch_embedding_components(kernel,
                                                             components)

  out = pathlib.Path(out)
  out.mkdir(parents=True, exist_ok=True)
  if 'cls' in prefix:
    plot_cls_attention(
        out / 'cls_attention.png', display[shown],
        analysis.cls_attention(attentions[-1][shown], grid, len(prefix)))
    if 'dist' in prefix:
      plot_cls_attention(
          out / 'dist_attention.png', display[shown],
          analysis.cls_attention(attentions[-1][shown], grid, len(prefix),
                                 query=prefix.index('dist')),
          token='distillation')
    needed = len(files) if files else num_images
    rollout = analysis.attention_rollout([a[:needed] for a in attentions])
    rollout = analysis.token_to_patches(rollout, grid, len(prefix),
                                        prefix.index('cls'))
    plot_rollout(out / 'attention_rollout.png', display[shown],
                 rollout[shown])
    for i, path in enumerate(files or []):
      plot_rollout(out / f'rollout_{path.stem}.png', display[i:i + 1],
                   rollout[i:i + 1])
  else:
    reason = f"no class token (classifier='{model.classifier}')"
    not_drawn['cls_attention.png'] = reason
    not_drawn['attention_rollout.png'] = reason
  uniform = analysis.uniform_attention_distance(
      grid, patch_size, exclude_self=model.locality_attention)
  plot_attention_distance(out / 'attention_distance.png', distances, size,
                          uniform)
  if positions is not None:
    plot_position_embeddings(
        out / 'position_embeddings.png', similarity, correlation,
        title=None if model.posemb == 'learned' else
        "fixed sine-cosine position embedding (posemb='sincos2d'), not "
        'learned')
  if kernel is not None:
    plot_embedding_filters(out / 'embedding_filters.png', filters, explained,
                           filters_title)
  # A figure of the same name from an earlier analysis would pass for this
  # model's.
  stale = [*not_drawn, *([] if 'dist' in prefix else ['dist_attention.png'])]
  for figure in stale:
    (out / figure).unlink(missing_ok=True)

  result = {
      **subject.described,
      'image_size': size,
      'patch_size': patch_size,
      'grid': list(grid),
      'distance_images': len(inputs),
      'mean_attention_distance_per_head': distances.round(3).tolist(),
      'mean_attention_distance_per_layer': distances.mean(1).round(3).tolist(),
      'uniform_attention_distance': round(uniform, 3),
      'prefix_tokens': prefix,
      'position_embedding': model.posemb,
  }
  if positions is not None:
    result['position_similarity_distance_correlation'] = round(correlation, 4)
  if kernel is not None:
    result['embedding_filter_explained_variance'] = explained.round(
        4).tolist()
  if not_drawn:
    result['not_drawn'] = not_drawn
  if files:
    result['top5'] = {str(f): best for f, best in zip(files, top5(logits,
                                                                   names))}
  (out / 'analysis.json').write_text(json.dumps(result, indent=1) + '\n')
  if workdir is not None:
    _to_tensorboard(pathlib.Path(workdir) / 'tensorboard' / 'analysis', out,
                    subject.described['step'])
  return result


def _to_tensorboard(directory: pathlib.Path, figures: pathlib.Path,
                    step: int):
  """The figures as images beside the run's curves in TensorBoard, at the
  step of the checkpoint analysed."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  with SummaryWriter(str(directory)) as writer:
    for path in sorted(figures.glob('*.png')):
      with Image.open(path) as image:
        writer.add_image(path.stem, np.asarray(image.convert('RGB')),
                         global_step=step, dataformats='HWC')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  # What it wrote is the output; jax's and orbax's progress notes are not.
  logging.set_verbosity(logging.ERROR)
  try:
    result = analyze(
        _OUT.value, workdir=_WORKDIR.value, step=_STEP.value,
        data_dir=_DATA_DIR.value, checkpoint_path=_CHECKPOINT.value,
        model_name=_MODEL.value, images=_IMAGES.value,
        class_names=_CLASS_NAMES.value, num_images=_NUM_IMAGES.value,
        distance_images=_DISTANCE_IMAGES.value, components=_COMPONENTS.value)
  except (errors.VitJaxError, OSError) as e:
    raise SystemExit(f'error: {e}') from None
  out = pathlib.Path(_OUT.value)
  print(f'Wrote into {out}:')
  for path in sorted(out.iterdir()):
    print(f'  {path}')
  for line in not_drawn_lines(result):
    print(line)


if __name__ == '__main__':
  app.run(main)
