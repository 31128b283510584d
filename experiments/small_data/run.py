r"""The small-data study: ViT-Tiny against two CNNs on 5,000 CIFAR-10 images.

  python experiments/small_data/run.py --data_dir=../shared/data/cifar10-5k \
      --workdir=/tmp/small_data

Trains `configs/cifar_small.py` for every model, recipe (random crop + flip on
or off) and seed not yet finished in --workdir, then the default recipe at the
other --batch_sizes (the study does not state its batch size), one
`vit_jax.main` process per run (rerunning resumes), then writes, next to this
file, `results.json`, `learning_curves.png` and the two results tables inside
`README.md`.
--summarize_only skips training and summarises the runs that exist.
"""

import json
import pathlib
import subprocess
import sys

from absl import app
from absl import flags
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]

_DATA_DIR = flags.DEFINE_string('data_dir', '../shared/data/cifar10-5k',
                                'The 5k/1k CIFAR-10 subset.')
_WORKDIR = flags.DEFINE_string('workdir', '/tmp/small_data',
                               'One sub-directory per run; never committed.')
_SEEDS = flags.DEFINE_list('seeds', ['0', '1', '2'],
                           'Seeds of the default recipe.')
_OTHER_SEEDS = flags.DEFINE_list('other_seeds', ['0'],
                                 'Seeds of the other recipe.')
_MODELS = flags.DEFINE_list('models', ['vit', 'simple_cnn', 'small_resnet'],
                            'configs/cifar_small.py models to train.')
_BATCH_SIZES = flags.DEFINE_list(
    'batch_sizes', ['64', '256'],
    'Batch sizes other than the config\'s to train the default recipe with '
    '(seed 0).')
_BATCH_SIZE_MODELS = flags.DEFINE_list(
    'batch_size_models', ['simple_cnn', 'small_resnet'],
    'Models to train at --batch_sizes: those furthest from the study.')
_SUMMARIZE_ONLY = flags.DEFINE_bool('summarize_only', False,
                                    'Only summarise finished runs.')

# Best test accuracy / final train accuracy the study reports.
STUDY = {
    'vit': ('ViT-Tiny', 0.4960, 0.5352),
    'simple_cnn': ('SimpleCNN', 0.7080, 0.8024),
    'small_resnet': ('SmallResNet', 0.6330, 0.6906),
}
# configs/cifar_small.py's default is the first.
RECIPES = {'augment': True, 'no_augment': False}
TABLE_START = '<!-- results table: written by run.py -->'
TABLE_END = '<!-- end of results table -->'
BATCH_TABLE_START = '<!-- batch-size table: written by run.py -->'
BATCH_TABLE_END = '<!-- end of batch-size table -->'


def run_name(model: str, recipe: str, seed: int,
             batch_size: int | None = None) -> str:
  batch = '' if batch_size is None else f'batch{batch_size}_'
  return f'{model}_{recipe}_{batch}seed{seed}'


def planned_runs():
  """(model, recipe, seed, batch size or None for the config's) in order: the
  first seed of both recipes, the default recipe's other seeds, then the batch
  sizes, so that a session cut short still compares the recipes."""
  first, *rest = _SEEDS.value
  for seeds, recipe in (([first], 'augment'), (_OTHER_SEEDS.value, 'no_augment'),
                        (rest, 'augment')):
    for seed in seeds:
      for model in _MODELS.value:
        yield model, recipe, int(seed), None
  for batch_size in _BATCH_SIZES.value:
    for model in _MODELS.value:
      if model in _BATCH_SIZE_MODELS.value:
        yield model, 'augment', int(first), int(batch_size)


def train(workdir: pathlib.Path, data_dir: pathlib.Path):
  for model, recipe, seed, batch_size in planned_runs():
    directory = workdir / run_name(model, recipe, seed, batch_size)
    if (directory / 'summary.json').exists():
      continue
    directory.mkdir(parents=True, exist_ok=True)
    print(f'training {directory.name}', flush=True)
    overrides = [] if batch_size is None else [
        f'--config.batch_size={batch_size}']
    with open(directory / 'log.txt', 'a') as log:
      subprocess.run([
          sys.executable, '-m', 'vit_jax.main',
          f'--config={REPO / "configs/cifar_small.py"}:{model}',
          f'--config.augment={RECIPES[recipe]}', f'--config.seed={seed}',
          f'--config.data_dir={data_dir}', f'--workdir={directory}', *overrides
      ], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True)


def parameter_count(model: str) -> int:
  import jax  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, str(REPO))
  from configs import cifar_small  # pylint: disable=g-import-not-at-top
  from vit_jax import models  # pylint: disable=g-import-not-at-top
  config = cifar_small.get_config(model)
  module = models.create_model(config.model, 10, **config.model_overrides)
  shapes = jax.eval_shape(
      lambda: module.init(jax.random.key(0), np.zeros((1, 32, 32, 3)),
                          train=False))
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes['params']))


def collect(workdir: pathlib.Path) -> dict:
  results = {}
  for model in STUDY:
    for recipe in RECIPES:
      runs = []
      for directory in sorted(workdir.glob(f'{model}_{recipe}_seed*')):
        if not (directory / 'summary.json').exists():
          continue
        summary = json.loads((directory / 'summary.json').read_text())
        history = [json.loads(line) for line in
                   (directory / 'metrics.jsonl').read_text().splitlines()]
        runs.append({
            'seed': int(directory.name.rsplit('seed', 1)[1]),
            'best_test_accuracy': summary['best_test_accuracy'],
            'best_epoch': summary['best_epoch'],
            'final_train_accuracy': summary['final_train_accuracy'],
            'wall_minutes': sum(r['epoch_seconds'] for r in history) / 60,
            'train_accuracy': [r['train_accuracy'] for r in history],
            'test_accuracy': [r['test_accuracy'] for r in history],
        })
      if runs:
        results.setdefault(model, {'parameters': parameter_count(model)})
        results[model][recipe] = runs
  return results


def _mean_std(values) -> str:
  values = 100 * np.asarray(values)
  if len(values) == 1:
    return f'{values[0]:.1f}'
  return f'{values.mean():.1f} ± {values.std(ddof=1):.1f}'


def table(results: dict) -> str:
  lines = [
      '| Model | Params | Recipe | Seeds | Best test acc (%) | Final train acc '
      '(%) | Best epoch | Wall time (min) | Study: best test / final train (%) |',
      '|---|---|---|---|---|---|---|---|---|'
  ]
  for model, by_recipe in results.items():
    name, study_test, study_train = STUDY[model]
    for recipe in RECIPES:
      runs = by_recipe.get(recipe)
      if not runs:
        continue
      column = lambda key: [r[key] for r in runs]  # pylint: disable=cell-var-from-loop
      lines.append(
          f'| {name} | {by_recipe["parameters"]:,} | {recipe.replace("_", " ")}'
          f' | {len(runs)} | {_mean_std(column("best_test_accuracy"))} | '
          f'{_mean_std(column("final_train_accuracy"))} | '
          f'{", ".join(str(e) for e in column("best_epoch"))} | '
          f'{np.mean(column("wall_minutes")):.1f} | '
          f'{100 * study_test:.1f} / {100 * study_train:.1f} |')
  return '\n'.join(lines)


def plot(results: dict, path: pathlib.Path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4),
                           sharey=True, squeeze=False)
  colors = {'augment': 'tab:blue', 'no_augment': 'tab:orange'}
  for ax, (model, by_recipe) in zip(axes[0], results.items()):
    name, study_test, _ = STUDY[model]
    for recipe, color in colors.items():
      for key, style in (('test_accuracy', '-'), ('train_accuracy', '--')):
        curves = [r[key] for r in by_recipe.get(recipe, [])]
        if not curves:
          continue
        curves = 100 * np.asarray(curves)
        epochs = np.arange(1, curves.shape[1] + 1)
        label = f'{recipe.replace("_", " ")}, {key.split("_")[0]}'
        ax.plot(epochs, curves.mean(0), style, color=color,
                label=f'{label} (n={len(curves)})')
        if len(curves) > 1:
          ax.fill_between(epochs, curves.min(0), curves.max(0), color=color,
                          alpha=0.2)
    ax.axhline(100 * study_test, color='gray', linestyle=':',
               label='study, best test')
    ax.set_title(f'{name} ({by_recipe["parameters"]:,} params)')
    ax.set_xlabel('epoch')
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel('accuracy (%)')
  axes[0][0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)


def write_table(readme: pathlib.Path, text: str):
  content = readme.read_text()
  start, end = content.index(TABLE_START), content.index(TABLE_END)
  readme.write_text(content[:start + len(TABLE_START)] + '\n\n' + text +
                    '\n\n' + content[end:])


def main(argv):
  del argv
  workdir = pathlib.Path(_WORKDIR.value).absolute()
  data_dir = pathlib.Path(_DATA_DIR.value).absolute()
  if not _SUMMARIZE_ONLY.value:
    if not (data_dir / 'cifar-10-batches-bin').is_dir():
      sys.exit(f'error: no cifar-10-batches-bin/ in --data_dir={data_dir}; '
               'point it at the 5k/1k CIFAR-10 subset (see the README).')
    train(workdir, data_dir)
  results = collect(workdir)
  if not results:
    sys.exit(f'error: no finished runs in {workdir}.')
  (HERE / 'results.json').write_text(json.dumps(results, indent=1) + '\n')
  plot(results, HERE / 'learning_curves.png')
  write_table(HERE / 'README.md', table(results))
  print(table(results))


if __name__ == '__main__':
  app.run(main)
