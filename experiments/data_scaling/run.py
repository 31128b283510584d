r"""Where, if anywhere, ViT-Tiny overtakes the CNNs as the training set grows.

  tar xzf ../shared/data/cifar10-jpeg-full.tar.gz -C /tmp/cifar10-jpeg
  python experiments/data_scaling/run.py --jpeg_dir=/tmp/cifar10-jpeg \
      --workdir=/tmp/data_scaling

Trains `configs/cifar_small.py`'s three models, the study's recipe unchanged
(30 epochs, AdamW, crop + flip, label smoothing 0.1, batch 128), on the first
N/10 images of every class of the JPEG CIFAR-10 (N in --sizes: nested,
class-balanced subsets, the images in the official batch order), each tested
on all 10,000 test images. One `vit_jax.main` process per run; rerunning
skips the runs finished in --workdir or recorded in the committed
`results.json`, and resumes an interrupted one. After each run it writes,
next to this file, `results.json` (one record per run),
`accuracy_vs_size.png`, and the table and the runs still missing inside
`README.md`. --summarize_only skips training.
"""

import math
import pathlib
import sys
from typing import Callable

from absl import app
from absl import flags
import numpy as np

from experiments import runs
from vit_jax.analysis import plotting

HERE = pathlib.Path(__file__).resolve().parent
RECIPE = 'study'


def subset(jpeg_dir: pathlib.Path, root: pathlib.Path, size: int
           ) -> pathlib.Path:
  """An image folder of the first size/10 training images of each class
  (links into `jpeg_dir`) and the whole test split."""
  directory = root / f'cifar10_{size}'
  done = directory / '.complete'
  if done.exists():
    return directory
  per_class = size // 10
  for class_dir in sorted((jpeg_dir / 'train').iterdir()):
    images = sorted(class_dir.iterdir())
    if len(images) < per_class:
      sys.exit(f'error: {class_dir} has {len(images)} images, fewer than '
               f'the {per_class} a {size}-image subset needs.')
    target = directory / 'train' / class_dir.name
    target.mkdir(parents=True, exist_ok=True)
    for image in images[:per_class]:
      link = target / image.name
      if not link.exists():
        link.symlink_to(image)
  test = directory / 'test'
  if not test.exists():
    test.symlink_to(jpeg_dir / 'test')
  done.touch()
  return directory


def run_name(model: str, size: int, seed: int) -> str:
  return f'{model}_{RECIPE}_n{size}_seed{seed}'


def record_name(record: dict) -> str:
  """The name of the run a results.json record comes from."""
  return run_name(record['model'], record['train_examples'], record['seed'])


def planned_runs(sizes: list[int], seeds: list[int], models: list[str]):
  """(model, size, seed) in the order they train: size by size."""
  for size in sizes:
    for seed in seeds:
      for model in models:
        yield model, size, seed


def train(workdir: pathlib.Path, jpeg_dir: pathlib.Path, planned: list,
          landed: dict[str, dict] | None = None,
          after_each_run: Callable[[], None] = lambda: None):
  """Trains the runs of `planned` not in `landed` (the committed records),
  calling `after_each_run` as each finishes."""
  landed = landed or {}
  for model, size, seed in planned:
    name = run_name(model, size, seed)
    if name in landed or runs.finished(workdir / name):
      continue
    runs.train(
        workdir / name, f'configs/cifar_small.py:{model}',
        {'dataset': 'image_folder', 'train_examples_per_file': 0,
         'test_examples': 0, 'seed': seed,
         'data_dir': subset(jpeg_dir, workdir / 'data', size)},
        {'recipe': RECIPE, 'train_examples': size})
    after_each_run()


def load_runs(workdir: pathlib.Path,
              landed: dict[str, dict] | None = None) -> list[dict]:
  """The records of the runs finished in `workdir`, and of those in `landed`
  that `workdir` does not hold."""
  records = runs.load_records(workdir, landed or {}, record_name)
  return sorted(records.values(), key=lambda r: (
      r['train_examples'], r['model'], r['seed']))


def by_model_and_size(records: list[dict]) -> dict:
  """{model: {size: [best test accuracy of each seed]}}"""
  table = {}
  for r in records:
    table.setdefault(r['model'], {}).setdefault(
        r['train_examples'], []).append(r['best_test_accuracy'])
  return table


def crossovers(curves: dict) -> list[tuple[str, float]]:
  """(CNN, training-set size) where the ViT's mean best accuracy meets the
  CNN's, interpolated linearly in log(size) between measured sizes."""
  found = []
  vit = curves.get('vit', {})
  for model, curve in curves.items():
    if model == 'vit':
      continue
    sizes = sorted(set(vit) & set(curve))
    gaps = [np.mean(vit[s]) - np.mean(curve[s]) for s in sizes]
    for (a, b), (ga, gb) in zip(zip(sizes, sizes[1:]), zip(gaps, gaps[1:])):
      if ga < 0 <= gb:
        t = -ga / (gb - ga)
        found.append((model, math.exp(math.log(a) + t *
                                      (math.log(b) - math.log(a)))))
  return found


def table(records: list[dict]) -> str:
  curves = by_model_and_size(records)
  sizes = sorted({r['train_examples'] for r in records})
  lines = ['| Model | ' + ' | '.join(f'{s:,}' for s in sizes) + ' |',
           '|---|' + '---|' * len(sizes)]
  for model in runs.NAMES:
    if model not in curves:
      continue
    cells = [runs.mean_std(curves[model][s]) if s in curves[model] else
             'not run yet' for s in sizes]
    lines.append(f'| {runs.NAMES[model]} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def plot(records: list[dict], path: pathlib.Path):
  plt = plotting.pyplot()
  curves = by_model_and_size(records)
  fig, ax = plt.subplots(figsize=(6, 4))
  for model, curve in curves.items():
    sizes = sorted(curve)
    means = [100 * np.mean(curve[s]) for s in sizes]
    ax.plot(sizes, means, 'o-', label=runs.NAMES[model])
  for cnn, size in crossovers(curves):
    ax.axvline(size, color='gray', linestyle=':')
    ax.annotate(f'ViT meets {runs.NAMES[cnn]}\n~{size:,.0f}',
                (size, ax.get_ylim()[0]),
                fontsize=8, rotation=90, va='bottom')
  ax.set_xscale('log')
  ax.set_xlabel('training images (log scale)')
  ax.set_ylabel('best test accuracy (%), 10,000 test images')
  ax.set_title('CIFAR-10, study recipe, 30 epochs')
  ax.grid(alpha=0.3, which='both')
  ax.legend()
  fig.tight_layout()
  plotting.save_figure(fig, path)


def summarize(workdir: pathlib.Path, planned: list,
              landed: dict[str, dict]) -> list[dict]:
  """Writes results.json, accuracy_vs_size.png and the README's table and
  missing runs from the runs finished in `workdir` or `landed`; returns
  their records."""
  records = load_runs(workdir, landed)
  runs.write_summary(HERE, records, f'{workdir} or results.json', {
      'results table': table(records),
      'missing runs': runs.missing_runs(
          [run_name(*run) for run in planned],
          {record_name(r) for r in records})},
                     {'accuracy_vs_size.png': plot})
  return records


def main(argv):
  del argv
  runs.catch_stop_signals()
  args = flags.FLAGS
  workdir = pathlib.Path(args.workdir).absolute()
  unknown = [m for m in args.models if m not in runs.NAMES]
  if unknown or not args.models:
    sys.exit(f'error: --models={",".join(args.models)}: use some of '
             f'{",".join(runs.NAMES)}.')
  planned = list(planned_runs(
      runs.integers('sizes', args.sizes, multiple_of=10,
                    example='5000,10000 (the subsets are class-balanced)'),
      runs.integers('seeds', args.seeds, minimum=0), args.models))
  landed = runs.landed(HERE / 'results.json', record_name)
  if not args.summarize_only:
    jpeg_dir = pathlib.Path(args.jpeg_dir).absolute()
    if not (jpeg_dir / 'train').is_dir() or not (jpeg_dir / 'test').is_dir():
      sys.exit(f'error: no train/ and test/ in --jpeg_dir={jpeg_dir}; unpack '
               '../shared/data/cifar10-jpeg-full.tar.gz there first.')
    # Each run lands in results.json as it finishes: a session that ends
    # mid-run loses only that run on a fresh machine.
    train(workdir, jpeg_dir, planned, landed,
          lambda: summarize(workdir, planned, landed))
  print(table(summarize(workdir, planned, landed)))


def _define_flags():
  # Defined only when run: the tests import this module beside vit_jax's,
  # which define flags of the same names.
  flags.DEFINE_string(
      'jpeg_dir', '/tmp/cifar10-jpeg',
      'The unpacked cifar10-jpeg-full.tar.gz: train/<class>/NNNN.jpg, test/.')
  flags.DEFINE_string('workdir', '/tmp/data_scaling', 'Subsets and one '
                      'directory per run; never committed.')
  flags.DEFINE_list('sizes', ['5000', '10000', '25000', '50000'],
                    'Training-set sizes, multiples of 10.')
  flags.DEFINE_list('models', ['simple_cnn', 'small_resnet', 'vit'],
                    'configs/cifar_small.py models.')
  flags.DEFINE_list('seeds', ['0'], 'Seeds of every (model, size).')
  flags.DEFINE_bool('summarize_only', False, 'Only summarise finished runs.')


if __name__ == '__main__':
  _define_flags()
  app.run(main)
