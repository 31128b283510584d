r"""Figures of what a ViT learned, from any checkpoint (docs/analysis.md).

  python -m vit_jax.analyze --workdir=/tmp/vit_tiny --out=/tmp/vit_tiny/analysis
  python -m vit_jax.analyze --checkpoint=ViT-B_16.npz --model=ViT-B_16 \
      --images=photos/ --class_names=imagenet21k_classes.txt --out=/tmp/b16

A run is analyzed on its test images, whose figures also go to its
TensorBoard, unless --images is given; another checkpoint needs --images."""

# pylint: disable=g-import-not-at-top,wrong-import-position
from vit_jax.runtime import stop_signals

if __name__ == '__main__':
  # Before jax loads: Ctrl-C or SIGTERM stop it at once, whatever it does.
  stop_signals.catch(at_once='stopped the analysis; --out is as it was')

import json
import pathlib
import sys

from absl import app
from absl import flags
from absl import logging
import numpy as np
from PIL import Image
from tensorboardX import SummaryWriter

from vit_jax import errors
from vit_jax.analysis import figures
from vit_jax.analysis import measures
from vit_jax.analysis import subjects
from vit_jax.checkpoints import reading
from vit_jax.errors import AnalysisError
from vit_jax.models import names
from vit_jax.runtime import command
from vit_jax.runtime import files

_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'A vit_jax.main run, or pass --checkpoint '
    '(WORKDIR/best_checkpoint: at its best evaluation, kept with '
    'config.keep_best_checkpoint).')
_CHECKPOINT, _MODEL, _STEP, _DATA_DIR = command.define_shared_flags(
    'checkpoint', 'model', 'step', 'data_dir')
_IMAGES = flags.DEFINE_list(
    'images', None, "Image files or directories to analyze (default: the "
    "run's test images).")
_CLASS_NAMES = flags.DEFINE_string(
    'class_names', None, 'A text file of the class names, one per line, to '
    "name the top-5 predictions of --images (default: a run's classes.json).")
_OUT = flags.DEFINE_string('out', None, 'Where figures and analysis.json go.')
_NUM_IMAGES = flags.DEFINE_integer('num_images', 4,
                                   'Test images shown in the attention maps.',
                                   lower_bound=1)
_DISTANCE_IMAGES = flags.DEFINE_integer(
    'distance_images', 512, 'Test images the attention distances average.',
    lower_bound=1)
_COMPONENTS = flags.DEFINE_integer(
    'components', 28, 'Principal components of the embedding filters shown.',
    lower_bound=1)
flags.mark_flags_as_required(['out'])

# And `rollout_<image>.png` with --images.
_WRITTEN = ('cls_attention.png', 'cls_attention_layers.png',
            'dist_attention.png', 'attention_rollout.png',
            'attention_distance.png', 'position_embeddings.png',
            'embedding_filters.png', 'analysis.json')


def analyze(out, *, workdir=None, step=None, data_dir=None, checkpoint=None,
            model=None, images=None, class_names=None, num_images=4,
            distance_images=512, components=28) -> dict:
  """Writes the figures and analysis.json of a run or checkpoint into `out`."""
  out = pathlib.Path(out)
  # Before minutes of work: --out is replaced whole, and may hold an earlier
  # analysis only.
  if out.is_file():
    raise AnalysisError(f'--out={out} is a file: pass a new directory, or '
                        'one of an earlier analysis.')
  if others := files.foreign_files(
      out, lambda name: name in _WRITTEN or
      (name.startswith('rollout_') and name.endswith('.png'))):
    raise AnalysisError(f'--out={out} holds files an analysis '
                        f'does not ({others}), which this one would replace: '
                        'pass a new directory, or one of an earlier analysis.')
  if (workdir is None) == (checkpoint is None):
    raise AnalysisError('Pass one of --workdir (a run) and --checkpoint '
                        '(any checkpoint).')
  subject, described = subjects.load(workdir or checkpoint, model, step)
  if subject.config is None and not images:
    raise AnalysisError(
        (f'--workdir={workdir} is no run: pass it as --checkpoint, with '
         '--images' if workdir else '--checkpoint needs --images') +
        ': the images to look at (files or directories).')
  if subject.config is not None and data_dir:
    subject.config.data_dir = data_dir
  image_files = subjects.image_files(images) if images else None
  pixels = (subjects.read_images(image_files, subject.image_size)
            if image_files else subjects.run_test_images(
                subject.config, max(num_images, distance_images)))
  inputs, display = subjects.model_inputs(pixels, subject)
  names = (subjects.read_class_names(class_names, subject)
           if class_names else subject.class_names)
  logits, attentions, distances, rollout = _forward(subject, inputs, num_images)
  result = dict(described, image_size=subject.image_size,
                patch_size=subject.model.effective_patch_size, grid=list(
                    subjects.grid(subject)), distance_images=len(inputs),
                prefix_tokens=list(subject.model.prefix_tokens),
                position_embedding=subject.model.posemb)

  def write(into: pathlib.Path):
    draw_position_embeddings(into, subject, result)
    draw_embedding_filters(into, subject, components, result)
    draw_token_attention(into, subject, display, attentions, rollout,
                         image_files, result)
    draw_attention_distance(into, subject, distances, result)
    if image_files:
      result['top5'] = dict(
          zip(map(str, image_files), subjects.top5(logits, names)))
    (into / 'analysis.json').write_text(json.dumps(result, indent=1) + '\n')

  try:
    files.replace_directory_atomically(out, write)
  except OSError as e:  # a full or read-only disk
    raise AnalysisError(
        errors.write_failed(out, e, '--out is as it was',
                            'another --out')) from e
  if workdir is not None and not images:  # the run's own test images
    events = reading.run_directory(workdir) / 'tensorboard' / 'analysis'
    try:  # the figures as images at the step analyzed
      with SummaryWriter(str(events)) as writer:
        for path in sorted(out.glob('*.png')):
          with Image.open(path) as image:
            writer.add_image(path.stem, np.asarray(image.convert('RGB')),
                             global_step=subject.step, dataformats='HWC')
    except OSError as e:
      raise AnalysisError(
          errors.write_failed(events, e,
                              f'the analysis in {out} is whole')) from e
  return result


def _forward(subject: reading.Loaded, inputs: np.ndarray, num_images: int):
  """Logits, the maps shown, the mean distances, each rollout's [CLS] row."""
  # A large model's maps of 512 images (or of every --images file) would not
  # fit in memory: every layer's are kept for the images shown, and each
  # batch's distances summed and rollout's first row ([CLS]'s) kept.
  distance_sums, rollouts = [], []

  def each_batch(attention: list[np.ndarray]):
    distance_sums.append(
        len(attention[0]) * attention_distances(subject, attention))
    rollouts.append(measures.attention_rollout(attention)[:, :1])

  logits, attentions = subjects.forward(subject.model, subject.variables,
                                        inputs, num_images, each_batch)
  return (logits, attentions, sum(distance_sums) / len(inputs),
          np.concatenate(rollouts))


def _not_drawn(result: dict, reason: str, *figure_files: str):
  result.setdefault('not_drawn', {}).update(dict.fromkeys(figure_files, reason))


def draw_position_embeddings(out: pathlib.Path, subject: reading.Loaded,
                             result: dict):
  """position_embeddings.png and its number, or why not, into `result`."""
  model, grid = subject.model, subjects.grid(subject)
  if (table := subjects.position_table(model, subject.params, grid)) is None:
    _not_drawn(result, f"no position embedding (posemb='{model.posemb}')",
               'position_embeddings.png')
    return
  similarity = measures.position_embedding_similarity(table, grid)
  correlation = measures.similarity_distance_correlation(similarity)
  figures.plot_position_embeddings(
      out / 'position_embeddings.png', similarity, correlation,
      title=None if model.posemb == 'learned' else
      "fixed sine-cosine position embedding (posemb='sincos2d'), not learned")
  result['position_similarity_distance_correlation'] = round(correlation, 4)


def draw_embedding_filters(out: pathlib.Path, subject: reading.Loaded,
                           components: int, result: dict):
  """embedding_filters.png and its numbers, or why not, into `result`."""
  kernel, title = subjects.embedding_filters(subject.model, subject.params)
  if kernel is None:
    _not_drawn(result, title, 'embedding_filters.png')
    return
  filters, explained = measures.patch_embedding_components(kernel, components)
  figures.plot_embedding_filters(out / 'embedding_filters.png', filters,
                                 explained, title)
  result['embedding_filter_explained_variance'] = explained.round(4).tolist()


def draw_token_attention(out: pathlib.Path, subject: reading.Loaded,
                         display: np.ndarray, attentions: list[np.ndarray],
                         rollout: np.ndarray, image_files, result: dict):
  """The prefix tokens' attention and `rollout`'s [CLS] row, or why not."""
  model, grid = subject.model, subjects.grid(subject)
  prefix = model.prefix_tokens
  if names.CLASS_TOKEN not in prefix:
    _not_drawn(result, f"no class token (classifier='{model.classifier}')",
               'cls_attention.png', 'cls_attention_layers.png',
               'attention_rollout.png')
    return
  shown = slice(0, len(attentions[-1]))  # the images whose maps are kept
  last_layer = attentions[-1][shown]
  figures.plot_cls_attention(
      out / 'cls_attention.png', display[shown],
      measures.cls_attention(last_layer, grid, len(prefix)))
  figures.plot_cls_attention(
      out / 'cls_attention_layers.png', [display[0]] * len(attentions),
      measures.cls_attention(np.stack([a[0] for a in attentions]), grid,
                             len(prefix)), layers=True)
  if names.DISTILLATION_TOKEN in prefix:
    figures.plot_cls_attention(
        out / 'dist_attention.png', display[shown],
        measures.cls_attention(last_layer, grid, len(prefix),
                               query=prefix.index(names.DISTILLATION_TOKEN)),
        token='distillation')
  rollout = measures.cls_attention(rollout, grid, len(prefix))
  figures.plot_rollout(out / 'attention_rollout.png', display[shown],
                       rollout[shown])
  stems, names_used = [path.stem for path in image_files or []], []
  for i, stem in enumerate(stems):  # numbered where two images share a stem
    name = stem if stems.count(stem) == 1 else f'{stem}_{i}'
    while name in names_used or (name != stem and name in stems):
      name += '_'  # never another image's name
    names_used.append(name)
    figures.plot_rollout(out / f'rollout_{name}.png', display[i:i + 1],
                         rollout[i:i + 1])


def attention_distances(subject: reading.Loaded,
                        attentions: list[np.ndarray]) -> np.ndarray:
  """Each layer's heads' mean attention distances over the images."""
  grid, patch_size = subjects.grid(subject), subject.model.effective_patch_size
  # The distances of 'gap' models' heads still use patch-to-patch attention.
  return np.stack([
      measures.mean_attention_distance(a, grid, patch_size,
                                       len(subject.model.prefix_tokens))
      for a in attentions
  ])


def draw_attention_distance(out: pathlib.Path, subject: reading.Loaded,
                            distances: np.ndarray, result: dict):
  """attention_distance.png of (layers, heads) `distances`; the numbers."""
  grid, patch_size = subjects.grid(subject), subject.model.effective_patch_size
  uniform = measures.uniform_attention_distance(
      grid, patch_size, exclude_self=subject.model.locality_attention)
  figures.plot_attention_distance(out / 'attention_distance.png', distances,
                                  subject.image_size, uniform)
  result.update(
      mean_attention_distance_per_head=distances.round(3).tolist(),
      mean_attention_distance_per_layer=distances.mean(1).round(3).tolist(),
      uniform_attention_distance=round(uniform, 3))


def main(argv):
  if len(argv) > 1:
    sys.exit(f'error: unexpected arguments {" ".join(argv[1:])}; pass a run '
             'as --workdir=DIR or a checkpoint as --checkpoint=SOURCE, and '
             'images as --images=DIR or --images=A.jpg,B.jpg.')
  # What it wrote is the output; jax's and orbax's progress notes are not,
  # while a warning (a damaged checkpoint skipped) is, unless --verbosity asks.
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)
  command.quiet_libraries()
  result = errors.exit_on_user_error(lambda: analyze(
      _OUT.value, workdir=_WORKDIR.value, step=_STEP.value, data_dir=_DATA_DIR.
      value, checkpoint=_CHECKPOINT.value, model=_MODEL.value, images=_IMAGES.
      value, class_names=_CLASS_NAMES.value, num_images=_NUM_IMAGES.value,
      distance_images=_DISTANCE_IMAGES.value, components=_COMPONENTS.value
  ), also=(OSError,))  # an --out or --class_names that cannot be used
  out = pathlib.Path(_OUT.value)
  print(f'Wrote into {out}:', *sorted(out.iterdir()), sep='\n  ')
  not_drawn = result.get('not_drawn', {})
  for reason in dict.fromkeys(not_drawn.values()):  # one line per reason
    shown = [figure for figure, why in not_drawn.items() if why == reason]
    print(f'{reason}: {", ".join(shown)} not drawn')


if __name__ == '__main__':
  app.run(main, flags_parser=command.parse_flags)
