r"""The small-data study: ViT-Tiny against two CNNs on 5,000 CIFAR-10 images.

  python experiments/small_data/run.py --data_dir=../shared/data/cifar10-5k \
      --workdir=/tmp/small_data

Trains `configs/cifar_small.py` for every model, recipe (random crop + flip on
or off) and seed not yet finished in --workdir, then the default recipe at
other batch sizes (--batch_size_runs; the study does not state its own), one
`vit_jax.main` process per run (rerunning resumes), then writes, next to this
file, `results.json`, `learning_curves.png` and the two results tables inside
`README.md`.
--summarize_only skips training and summarises the runs that exist.
"""

import pathlib

from absl import app
from absl import flags
import numpy as np

from configs import cifar_small
from experiments import runs
from vit_jax.analysis import plotting

HERE = pathlib.Path(__file__).resolve().parent

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
_BATCH_SIZE_RUNS = flags.DEFINE_list(
    'batch_size_runs',
    ['simple_cnn:64', 'small_resnet:64', 'small_resnet:256'],
    'MODEL:BATCH runs of the default recipe (seed 0) at batch sizes other '
    'than the config\'s, for the models furthest from the study (whose batch '
    'size is unstated).')
_SUMMARIZE_ONLY = flags.DEFINE_bool('summarize_only', False,
                                    'Only summarise finished runs.')

# Best test accuracy / final train accuracy the study reports.
STUDY = {
    'vit': (0.4960, 0.5352),
    'simple_cnn': (0.7080, 0.8024),
    'small_resnet': (0.6330, 0.6906),
}
# Recipe -> config.augment; configs/cifar_small.py's default is the first.
RECIPES = {'augment': True, 'no_augment': False}


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
  for run in _BATCH_SIZE_RUNS.value:
    model, batch_size = run.split(':')
    if model in _MODELS.value:
      yield model, 'augment', int(first), int(batch_size)


def train(workdir: pathlib.Path, data_dir: pathlib.Path):
  for model, recipe, seed, batch_size in planned_runs():
    overrides = {} if batch_size is None else {'batch_size': batch_size}
    runs.train(workdir / run_name(model, recipe, seed, batch_size),
               f'configs/cifar_small.py:{model}', {
                   'augment': RECIPES[recipe], 'seed': seed,
                   'data_dir': data_dir, **overrides})


def parameter_count(model: str) -> int:
  import jax  # pylint: disable=g-import-not-at-top
  from vit_jax import models  # pylint: disable=g-import-not-at-top
  module = models.from_config(cifar_small.get_config(model), 10)
  shapes = jax.eval_shape(
      lambda: module.init(jax.random.key(0), np.zeros((1, 32, 32, 3)),
                          train=False))
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes['params']))


def load_run(directory: pathlib.Path) -> tuple[str, str, dict]:
  """(model, recipe, record) of a finished run, from its config and
  summary: the record holds its per-epoch curves."""
  summary = runs.read_json(directory / 'summary.json')
  config = runs.read_json(directory / 'config.json')
  history = runs.history(directory)
  recipe = {augment: name for name, augment in RECIPES.items()}[
      config['augment']]
  return runs.model_key(config), recipe, {
      'seed': config['seed'],
      'batch_size': config['batch_size'],
      'steps_per_epoch': round(summary['steps'] / summary['epochs']),
      'best_test_accuracy': summary['best_test_accuracy'],
      'best_epoch': summary['best_epoch'],
      'final_train_accuracy': summary['final_train_accuracy'],
      'wall_minutes': sum(r['seconds'] for r in history) / 60,
      'train_accuracy': [r['train_accuracy'] for r in history
                         if 'train_accuracy' in r],
      'test_accuracy': [r['test_accuracy'] for r in history
                        if 'test_accuracy' in r],
  }


def collect(workdir: pathlib.Path) -> dict:
  """{model: {'parameters': n, recipe: [run, ...], 'batch_sizes': [run, ...]}}
  of the runs finished in `workdir`: each recipe's runs at the config's
  batch size, and 'batch_sizes' the default recipe's first seed at every
  batch size, the config's included."""
  loaded = [load_run(d) for d in sorted(workdir.glob('*')) if runs.finished(d)]
  first_seed = int(_SEEDS.value[0])
  results = {}
  for model in STUDY:
    config_batch_size = cifar_small.get_config(model).batch_size
    for recipe in RECIPES:
      group = [r for m, c, r in loaded if (m, c) == (model, recipe) and
               r['batch_size'] == config_batch_size]
      if group:
        results.setdefault(model, {'parameters': parameter_count(model)})
        results[model][recipe] = sorted(group, key=lambda r: r['seed'])
    probes = [r for m, c, r in loaded if (m, c) == (model, 'augment') and
              r['seed'] == first_seed]
    if len(probes) > 1:
      results[model]['batch_sizes'] = sorted(probes,
                                             key=lambda r: r['batch_size'])
  return results


def table(results: dict) -> str:
  lines = [
      '| Model | Params | Recipe | Seeds | Best test acc (%) | Final train acc '
      '(%) | Best epoch | Wall time (min) | Study: best test / final train (%) |',
      '|---|---|---|---|---|---|---|---|---|'
  ]
  for model, by_recipe in results.items():
    name = runs.NAMES[model]
    study_test, study_train = STUDY[model]
    for recipe in RECIPES:
      group = by_recipe.get(recipe)
      if not group:
        continue
      column = lambda key: [r[key] for r in group]  # pylint: disable=cell-var-from-loop
      lines.append(
          f'| {name} | {by_recipe["parameters"]:,} | {recipe.replace("_", " ")}'
          f' | {len(group)} | {runs.mean_std(column("best_test_accuracy"))} | '
          f'{runs.mean_std(column("final_train_accuracy"))} | '
          f'{", ".join(f"{e:g}" for e in column("best_epoch"))} | '
          f'{np.mean(column("wall_minutes")):.1f} | '
          f'{100 * study_test:.1f} / {100 * study_train:.1f} |')
  return '\n'.join(lines)


def batch_size_table(results: dict) -> str:
  lines = [
      '| Model | Batch size | Steps per epoch | Best test acc (%) | Final train '
      'acc (%) | Best epoch | Wall time (min) | Study: best test / final train '
      '(%) |', '|---|---|---|---|---|---|---|---|'
  ]
  for model, by_recipe in results.items():
    name = runs.NAMES[model]
    study_test, study_train = STUDY[model]
    for run in by_recipe.get('batch_sizes', []):
      lines.append(
          f'| {name} | {run["batch_size"]} | {run["steps_per_epoch"]} | '
          f'{100 * run["best_test_accuracy"]:.1f} | '
          f'{100 * run["final_train_accuracy"]:.1f} | {run["best_epoch"]:g} | '
          f'{run["wall_minutes"]:.1f} | '
          f'{100 * study_test:.1f} / {100 * study_train:.1f} |')
  return '\n'.join(lines)


def plot(results: dict, path: pathlib.Path):
  plt = plotting.pyplot()
  fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4),
                           sharey=True, squeeze=False)
  colors = {'augment': 'tab:blue', 'no_augment': 'tab:orange'}
  for ax, (model, by_recipe) in zip(axes[0], results.items()):
    name = runs.NAMES[model]
    study_test, _ = STUDY[model]
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
  plotting.save_figure(fig, path)


def main(argv):
  del argv
  runs.catch_stop_signals()
  workdir = pathlib.Path(_WORKDIR.value).absolute()
  data_dir = pathlib.Path(_DATA_DIR.value).absolute()
  if not _SUMMARIZE_ONLY.value:
    runs.require_cifar10_subset(data_dir)
    train(workdir, data_dir)
  results = collect(workdir)
  runs.write_summary(HERE, results, str(workdir),
                     {'results table': table(results),
                      'batch-size table': batch_size_table(results)},
                     {'learning_curves.png': plot})
  print(table(results), batch_size_table(results), sep='\n\n')


if __name__ == '__main__':
  app.run(main)
