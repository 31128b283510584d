"""The data-efficiency results.json, figure and README sections."""

import numpy as np

from experiments import runs
from experiments.data_efficiency import budgets
from experiments.data_efficiency import recipes
from experiments.data_efficiency import sweep

HERE = sweep.HERE


def planned() -> dict[str, dict]:
  """The sweep's runs: name -> what their records hold beside the summary."""
  # These runs hold no validation images: they choose on test.
  return {
      recipes.run_name(*run): dict(model=run[0], recipe=recipes.recipe_name(
          run[1]), train_examples=recipes.TRAIN_EXAMPLES, epochs=run[2],
                                   chosen_on='test')
      for run in sum(sweep.planned_runs(), [])
  }


def counted(records: list[dict]) -> list[dict]:
  """The records, each with training FLOPs: its run's, else its recipe's."""
  fields = ('model', 'recipe', 'epochs', 'train_examples')
  count = lambda r: {'train_flops': recipes.train_flops(*map(r.get, fields))}
  return [r if 'train_flops' in r else {**r, **count(r)} for r in records]


def table(records: list[dict]) -> str:
  """Per budget, every row and the share of the ViT's gap it closes."""
  groups = recipes.group_runs(records)
  blocks = []
  for epochs in sorted({r['epochs'] for r in records}):
    keys = sorted((k for k in groups if k[0] == epochs), key=lambda k:
                  (k[1] != 'vit', k[1], recipes.rank(k[2])))
    best_cnn = max((k for k in keys if k[1] != 'vit'),
                   key=lambda k: recipes.standing(groups[k]), default=None)
    study = (epochs, 'vit', 'study')
    rows = []
    for key in keys:
      group, closed, recipe = groups[key], '', key[2]
      if not recipes.ranked(group[0]):
        recipe += ' (pre-training: an online probe\'s accuracy)'
      elif key[1] == 'vit' and study in groups and best_cnn:
        # Each against the study ViT on the row's own seeds, paired.
        vit, base, cnn = (runs.by_seed(groups[k], 'best_test_accuracy')
                          for k in (key, study, best_cnn))
        gain, half = runs.paired(vit, base)
        gap = runs.paired({s: cnn[s] for s in vit if s in cnn}, base)[0]
        interval = f' ± {half:.1f}' if np.isfinite(half) else ''
        change = f' ({gain:+.1f}{interval})' if key != study else ''
        closed = f'{100 * gain / gap:.0f}%{change}'
      accuracies = (runs.mean_std([r[field] for r in group], show_n=True)
                    for field in ('best_test_accuracy', 'final_train_accuracy'))
      costs = runs.tflops_cell(group), runs.wall_time_cell(group)
      rows.append([runs.NAMES[key[1]], recipe, *accuracies, closed, *costs])
    blocks.append(f'**{epochs} epochs**' + (
        f' (best CNN: {runs.NAMES[best_cnn[1]]}, {best_cnn[2]}, '
        f'{recipes.accuracies(groups[best_cnn]).mean():.1f}%)'
        if best_cnn else '') + '\n\n' + runs.markdown_table([
            'Model', 'Recipe', 'Best test acc (%)', 'Final train acc (%)',
            'Gap to the best CNN closed (points over the study ViT ± '
            '95% interval; both paired by seed)', 'Training TFLOPs',
            'Wall time (min; CPU unless named)'
        ], rows))
  return '\n\n'.join(blocks)


def compared(*rows: str) -> str:
  """Two rows of the committed results.json, paired by seed, in words."""
  groups, named = recipes.group_runs(runs.read_json(HERE / 'results.json')), []
  for row in rows:
    model, recipe, epochs = (row.split(':') + ['', ''])[:3]
    key = (int(epochs) if epochs.isdigit() else epochs, model, recipe)
    if key not in groups:
      raise SystemExit(
          f'error: results.json has no row {row}: name one as '
          'MODEL:RECIPE:EPOCHS, e.g. vit:study+trivial_augment:100.')
    named += [row, runs.by_seed(groups[key], 'best_test_accuracy')]
  return runs.compared(*named)


def main(argv=None):
  runs.catch_stop_signals()
  parsing = runs.parser(__doc__, '/tmp/data_efficiency')
  parsing.add_argument('--compare', nargs=2, metavar='MODEL:RECIPE:EPOCHS',
                       help="Only print two committed rows' paired difference.")
  args = parsing.parse_args(argv)
  if args.compare:
    print(compared(*args.compare))
    return
  runs.summarize(
      HERE, args.workdir, planned(), recipes.record_name, lambda r:
      (r['epochs'], r['model'], recipes.rank(r['recipe']), r['seed']),
      lambda records: {
          'ablation table': table(counted(records)),
          'answer across budgets': budgets.answer(counted(records))
      }, {'budgets.png': budgets.plot})


if __name__ == '__main__':
  main()
