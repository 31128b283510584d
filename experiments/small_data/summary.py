r"""The small-data study's results from its runs' workdirs:

  python -m experiments.small_data.summary --workdir=/tmp/small_data

writes results.json, learning_curves.png and the README's tables here.
"""

import pathlib

import numpy as np

from configs import cifar_small
from experiments import runs
from experiments.small_data import sweep
from vit_jax.analysis import plotting

HERE = pathlib.Path(__file__).resolve().parent

# Best test accuracy / final train accuracy the study reports.
STUDY = {
    'vit': (0.4960, 0.5352), 'simple_cnn': (0.7080, 0.8024),
    'small_resnet': (0.6330, 0.6906),
}


def parameter_count(model: str) -> int:
  import jax  # pylint: disable=g-import-not-at-top
  from vit_jax import models  # pylint: disable=g-import-not-at-top
  module = models.from_config(cifar_small.get_config(model), 10)
  shapes = jax.eval_shape(lambda: module.init(jax.random.key(
      0), np.zeros((1, 32, 32, 3)), train=False))
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes['params']))


def load_run(directory: pathlib.Path) -> dict:
  """A finished run's record, with its recipe, batch size and curves."""
  config = runs.read_json(directory / 'config.json')
  history = runs.history(directory)
  recipe = {augment: name
            for name, augment in sweep.RECIPES.items()}[config['augment']]
  record = runs.record(directory,
                       {'recipe': recipe, 'batch_size': config['batch_size']})
  record['steps_per_epoch'] = round(history[-1]['step'] / history[-1]['epoch'])
  for key in ('train_accuracy', 'test_accuracy'):
    record[key] = [r[key] for r in history if key in r]
  return record


def collect(workdir: pathlib.Path) -> dict:
  """{model: {'parameters': n, recipe: runs at the config's batch size,
  'batch_sizes': the default recipe's runs of the seeds run at others}}"""
  loaded = sorted((load_run(d) for d in workdir.glob('*') if runs.finished(d)),
                  key=lambda r: (r['seed'], r['batch_size']))
  results = {}
  for model in STUDY:
    batch_size = cifar_small.get_config(model).batch_size
    ours = [r for r in loaded if r['model'] == model]
    for recipe in sweep.RECIPES:
      group = [
          r for r in ours
          if (r['recipe'], r['batch_size']) == (recipe, batch_size)
      ]
      if group:
        results.setdefault(model, {'parameters': parameter_count(model)})
        results[model][recipe] = group
    augmented = [r for r in ours if r['recipe'] == 'augment']
    probed = {r['seed'] for r in augmented if r['batch_size'] != batch_size}
    probes = [r for r in augmented if r['seed'] in probed]
    if len(probes) > 1:
      results[model]['batch_sizes'] = sorted(probes,
                                             key=lambda r: r['batch_size'])
  return results


def _study_cell(model: str) -> str:
  return ' / '.join(f'{100 * accuracy:.1f}' for accuracy in STUDY[model])


def table(results: dict) -> str:
  return runs.markdown_table([
      'Model', 'Params', 'Recipe', 'Seeds', 'Best test acc (%)',
      'Final train acc (%)', 'Best epoch', 'Wall time (min)',
      'Study: best test / final train (%)'
  ], [[
      runs.NAMES[model], f'{by_recipe["parameters"]:,}',
      recipe.replace('_', ' '),
      len(group), *(runs.mean_std([r[key] for r in group])
                    for key in ('best_test_accuracy', 'final_train_accuracy')),
      ', '.join(
          f'{r["best_epoch"]:g}'
          for r in group), f'{np.mean([r["wall_minutes"] for r in group]):.1f}',
      _study_cell(model)
  ] for model, by_recipe in results.items()
      for recipe, group in by_recipe.items() if recipe in sweep.RECIPES])


def batch_size_table(results: dict) -> str:
  return runs.markdown_table([
      'Model', 'Batch size', 'Steps per epoch', 'Best test acc (%)',
      'Final train acc (%)', 'Best epoch', 'Wall time (min)',
      'Study: best test / final train (%)'
  ], [[
      runs.NAMES[model], run['batch_size'], run['steps_per_epoch'],
      f'{100 * run["best_test_accuracy"]:.1f}',
      f'{100 * run["final_train_accuracy"]:.1f}', f'{run["best_epoch"]:g}',
      f'{run["wall_minutes"]:.1f}',
      _study_cell(model)
  ] for model, by_recipe in results.items()
      for run in by_recipe.get('batch_sizes', [])])


def plot(results: dict, path: pathlib.Path):
  plt = plotting.pyplot()
  fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4),
                           sharey=True, squeeze=False)
  colors = {'augment': 'tab:blue', 'no_augment': 'tab:orange'}
  for ax, (model, by_recipe) in zip(axes[0], results.items()):
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
    ax.axhline(100 * STUDY[model][0], color='gray', linestyle=':',
               label='study, best test')
    ax.set_title(f'{runs.NAMES[model]} ({by_recipe["parameters"]:,} params)')
    ax.set_xlabel('epoch')
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel('accuracy (%)')
  axes[0][0].legend(fontsize=8)
  fig.tight_layout()
  plotting.save_figure(fig, path)


def main(argv=None):
  runs.catch_stop_signals()
  workdir = runs.parser(__doc__, '/tmp/small_data').parse_args(argv).workdir
  results = collect(workdir)
  runs.write_summary(
      HERE, results, str(workdir), {
          'results table': table(results),
          'batch-size table': batch_size_table(results)
      }, {'learning_curves.png': plot})


if __name__ == '__main__':
  main()
