"""The data-efficiency results.json, figures and README sections."""

import pathlib

import numpy as np

from experiments import runs
from experiments.data_efficiency import budgets
from experiments.data_efficiency import recipes
from experiments.data_efficiency import sweep
from vit_jax.analysis import plotting

HERE = pathlib.Path(__file__).resolve().parent


def planned() -> dict[str, dict]:
  """The sweep's runs: name -> what their records hold beside the summary."""
  # These runs hold no validation images: they choose on test.
  return {
      recipes.run_name(*run): {
          'recipe': recipes.recipe_name(run[1]),
          'train_examples': recipes.TRAIN_EXAMPLES, 'epochs': run[2],
          'chosen_on': 'test'
      } for run in sum(sweep.planned_runs(), [])
  }


def table(records: list[dict]) -> str:
  """Per budget, every row and the share of the ViT's gap it closes."""
  groups = recipes.group_runs(records)
  blocks = []
  for epochs in sorted({r['epochs'] for r in records}):
    keys = sorted((k for k in groups if k[0] == epochs), key=lambda k:
                  (k[1] != 'vit', k[1], recipes.rank(k[2])))
    mean = {key: recipes.accuracies(groups[key]).mean() for key in keys}
    best_cnn = max((k
                    for k in keys if k[1] != 'vit'), key=mean.get, default=None)
    study = (epochs, 'vit', 'study')
    rows = []
    for key in keys:
      group, closed, recipe = groups[key], '', key[2]
      if not recipes.ranked(group[0]):
        recipe += ' (pre-training: an online probe\'s accuracy)'
      elif key[1] == 'vit' and study in groups and best_cnn:
        share = (mean[key] - mean[study]) / (mean[best_cnn] - mean[study])
        closed = f'{100 * share:.0f}%'
        if key != study:  # points over the study ViT, ± a paired interval
          _, half = runs.paired(*(runs.by_seed(g, 'best_test_accuracy')
                                  for g in (group, groups[study])))
          closed += (f' ({mean[key] - mean[study]:+.1f}' +
                     (f' ± {half:.1f})' if np.isfinite(half) else ')'))
      rows.append([
          runs.NAMES[key[1]], recipe,
          *(runs.mean_std([r[field] for r in group], show_n=True)
            for field in ('best_test_accuracy', 'final_train_accuracy')),
          closed,
          runs.wall_time_cell(group)
      ])
    blocks.append(
        f'**{epochs} epochs**' +
        (f' (best CNN: {runs.NAMES[best_cnn[1]]}, {best_cnn[2]}, '
         f'{mean[best_cnn]:.1f}%)' if best_cnn else '') + '\n\n' +
        runs.markdown_table([
            'Model', 'Recipe', 'Best test acc (%)', 'Final train acc (%)',
            'Gap to the best CNN closed (points over the study ViT ± '
            '95% interval, paired by seed)', 'Wall time (min; CPU unless named)'
        ], rows))
  return '\n\n'.join(blocks)


def plot(records: list[dict], path: pathlib.Path):
  """Each ViT recipe's accuracy (hollow: one seed) per budget, CNNs as lines."""
  plt = plotting.pyplot()
  budgets = sorted({r['epochs'] for r in records})
  groups = recipes.group_runs(records)
  shown = sorted(
      {
          recipe for (_, model, recipe), group in groups.items()
          if model == 'vit' and recipes.ranked(group[0])
      }, key=recipes.rank)
  fig, axes = plt.subplots(
      1, len(budgets), sharex=True, sharey=True, squeeze=False,
      figsize=(3.5 + 3.2 * len(budgets), 2.5 + 0.2 * len(shown)),
      layout='constrained')  # room for the legend below, whatever the rows
  cnn_recipes = [
      ('study', 'tab:red', 'study'),
      (recipes.recipe_name(recipes.CNN_AUGMENTED), 'tab:green', 'augmented')
  ] + [(recipes.recipe_name(ingredients), 'tab:purple',
        '+ ' + ' + '.join(ingredients))
       for ingredients in recipes.CNN_ROUND_THREE]
  legend = {}
  for ax, epochs in zip(axes[0], budgets):
    for row, recipe in enumerate(shown):
      if group := groups.get((epochs, 'vit', recipe)):
        seeds = len(group)
        legend[f'ViT-Tiny, {seeds} seed{"s" * (seeds > 1)}'] = ax.errorbar(
            recipes.accuracies(group).mean(), row, xerr=recipes.spread(group),
            fmt='o', ms=4, capsize=2, color='tab:blue',
            markerfacecolor='tab:blue' if seeds > 1 else 'white')
    for model, style in (('simple_cnn', '--'), ('small_resnet', ':')):
      for recipe, color, recipe_label in cnn_recipes:
        if cnn := groups.get((epochs, model, recipe)):
          legend[f'{runs.NAMES[model]}, {recipe_label}'] = ax.axvline(
              recipes.accuracies(cnn).mean(), linestyle=style, color=color)
    ax.set_title(f'{epochs} epochs')
    ax.set_xlabel('best test accuracy (%)', fontsize=9)
    ax.grid(alpha=0.3, axis='x')
  if shown:
    axes[0][0].set_yticks(range(len(shown)),
                          [recipes.label(recipe, shown)
                           for recipe in shown], fontsize=7)
    axes[0][0].set_ylim(len(shown) - 0.5, -0.5)  # the ablation's order, down
  fig.suptitle(
      'The ViT-Tiny\'s recipes on 5,000 CIFAR-10 images, against '
      'the CNNs\' (lines: their means over the seeds)', fontsize=10)
  ordered = sorted(legend, key=lambda name: not name.startswith('ViT'))
  fig.legend([legend[name] for name in ordered], ordered, fontsize=7, ncol=4,
             loc='outside lower center')
  plotting.save_figure(fig, path)


def main(argv=None):
  runs.catch_stop_signals()
  workdir = runs.parser(__doc__,
                        '/tmp/data_efficiency').parse_args(argv).workdir
  runs.summarize(
      HERE, workdir, planned(), recipes.record_name, lambda r:
      (r['epochs'], r['model'], recipes.rank(r['recipe']), r['seed']),
      lambda records: {
          'ablation table': table(records),
          'answer across budgets': budgets.answer(records)
      }, {'ablation.png': plot, 'budgets.png': budgets.plot})


if __name__ == '__main__':
  main()
