r"""How much of the ViT's gap to the CNNs the data-efficiency techniques close
on the study's 5,000 CIFAR-10 images.

  python experiments/data_efficiency/run.py \
      --data_dir=../shared/data/cifar10-5k --workdir=/tmp/data_efficiency

Trains `configs/data_efficient.py` with its techniques turned on one at a
time, from the study's recipe (all off) to the full one, for the ViT; the
CNNs with the study's recipe and with the same augmentations; at every
budget in --epochs; seeds as `order.planned_runs` orders them (the rows
that carry the conclusion get three). Round two adds ingredients from the
literature (`recipes.ROUND_TWO`), round three levers on each budget's
best recipe (`recipes.ROUND_THREE`, `ROUND_THREE_FIRST_BUDGET`), after
the CNNs with the ViT's best augmentation (`CNN_ROUND_THREE`); then it
trains the two best ViT recipes and each CNN's best, three seeds each, at
each budget of --long_epochs (first with --long_first) but the longest of
several, where the best ViT recipe and the best CNN train with seed 0, and
with seeds 1 and 2 if the ViT came within reach of the best CNN there
(`order.WITHIN_REACH`); round two's weakest rows at the last --epochs
budget (`recipes.ROUND_TWO_LATE`) train after the other long budgets'
rows, before the longest's (with --long_first, after its seed 0); up to
--side_by_side runs at once. The
recipes and records are `recipes.py`'s, the order `order.py`'s. One
`vit_jax.main` process per run; rerunning
skips the runs finished in --workdir or recorded in the committed
`results.json`, and resumes an interrupted one. After each run it writes,
next to this file, `results.json` (one record per run), `ablation.png`,
and the tables and the runs still missing inside `README.md`.
--summarize_only skips training; --max_runs stops after that many new runs
(a teacher or pre-training trained again counts as one); --hours trains
only the runs that will end in time on a machine that goes away with its
workdir (`ends_in_time`).
"""

import itertools
import pathlib
import sys
import time
from typing import Callable

from absl import app
from absl import flags
import jax
import numpy as np

from experiments import runs
from experiments import side_by_side as side_by_side_lib
from experiments.data_efficiency import budgets as budgets_lib
from experiments.data_efficiency import order
from experiments.data_efficiency import recipes
from vit_jax.analysis import plotting
from vit_jax.runtime import command

HERE = pathlib.Path(__file__).resolve().parent


def train(workdir: pathlib.Path, data_dir: pathlib.Path, budgets: list[int],
          max_runs: int, landed: dict[str, dict] | None = None,
          after_each_run: Callable[[], None] = lambda: None,
          long_budgets: tuple[int, ...] = (), side_by_side: int = 1,
          long_first: bool = False, hours: float = 0):
  """Trains the planned runs finished neither in `workdir` nor in `landed`
  (the committed records), at most `max_runs` new runs (0: all), up to
  `side_by_side` at once, calling `after_each_run` as each finishes;
  `long_first`: the long budgets' first (`order.planned_runs`); `hours`:
  only runs expected to end within that many hours from now
  (`ends_in_time`; 0: every run)."""
  too_long = (ends_in_time(workdir, landed or {}, time.monotonic() + 3600 *
                           hours) if hours else lambda _: None)
  with side_by_side_lib.SideBySide(side_by_side, after_each_run) as slots:
    unfinished = order.unfinished_runs(workdir, budgets, landed or {},
                                       long_budgets, slots.wait_for,
                                       slots.settle, long_first, too_long)
    for count in itertools.count():
      slots.free_slot()  # first: the next run is chosen from those finished
      if max_runs and count == max_runs:
        return
      directory, model, recipe, overrides = next(unfinished, (None,) * 4)
      if directory is None:
        return
      slots.start(directory, f'configs/data_efficient.py:{model}',
                  {'data_dir': data_dir, **overrides},
                  {'recipe': recipe, 'train_examples': recipes.TRAIN_EXAMPLES})


def ends_in_time(workdir: pathlib.Path, landed: dict[str, dict],
                 deadline: float) -> Callable[[order.Chain], str | None]:
  """`order.unfinished_runs`' too_long for a machine that goes away with
  its workdir at `deadline` (time.monotonic()), a run cut off with it: why
  a run, with the runs it trains first, would not end in time, each
  taking its `runs.cpu_minutes` among the records `landed` from other
  machines, at this machine's pace (`_pace`)."""
  # results.json holds this workdir's runs too once the runner rewrote it.
  committed = [record for name, record in landed.items()
               if not runs.finished(workdir / name)]

  def too_long(chain: order.Chain) -> str | None:
    minutes = [_cpu_minutes(committed, *run) for run in chain]
    left = (deadline - time.monotonic()) / 60
    with_sources = ' with the runs it reads' if len(chain) > 1 else ''
    if None in minutes:
      return ('no CPU run of its model has run yet to tell whether it'
              f'{with_sources} ends in the {runs.duration(left)} left of '
              '--hours')
    pace = _pace(workdir, committed)
    total = pace * sum(minutes)
    if total > left:
      paced = (f' at this machine\'s pace, {pace:.1f} times the records\' '
               'minutes' if abs(pace - 1) > 0.05 else '')
      return (f'about {runs.duration(total)}{with_sources}{paced}, more '
              f'than the {runs.duration(max(left, 0))} left of --hours')
    return None
  return too_long


def _pace(workdir: pathlib.Path, committed: list[dict]) -> float:
  """How many times the committed records' minutes this machine takes:
  the median, over the CPU runs finished in `workdir` whose model and
  recipe have committed CPU runs, of their minutes against those runs'
  estimate of them (another recipe's would measure the recipe, not the
  machine); 1 before any has finished."""
  ratios = []
  for record in recipes.load_runs(workdir):
    same = [r for r in committed if r['device'] == 'cpu' and
            (r['model'], r['recipe']) == (record['model'], record['recipe'])]
    if same and record['device'] == 'cpu' and record['wall_minutes'] > 0:
      ratios.append(record['wall_minutes'] / runs.cpu_minutes(
          same, record['model'], record['recipe'], record['epochs']))
  return float(np.median(ratios)) if ratios else 1.0


def _cpu_minutes(records: list[dict], model: str,
                 ingredients: tuple[str, ...], epochs: int) -> float | None:
  return runs.cpu_minutes(records, model, recipes.recipe_name(ingredients),
                          epochs)


def _gain(group: list[dict], study: list[dict]) -> str:
  """Points over the study-recipe ViT, with the standard error of the
  difference of the two means where both rows have seeds to estimate it."""
  a, b = recipes.accuracies(group), recipes.accuracies(study)
  gain = f'{a.mean() - b.mean():+.1f}'
  if len(a) > 1 and len(b) > 1:
    error = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    gain += f' ± {error:.1f}'
  return gain


def _seed_cell(group: list[dict], field: str) -> str:
  return runs.mean_std([r[field] for r in group], show_n=True)


def table(records: list[dict]) -> str:
  """Per budget: every recipe of every model, and for the ViT the share of
  the gap (study ViT to the best CNN of that budget) it closes."""
  groups = recipes.group_runs(records)
  lines = []
  for epochs in sorted({r['epochs'] for r in records}):
    cnns = {key: recipes.accuracies(group).mean()
            for key, group in groups.items()
            if key[0] == epochs and key[1] != 'vit'}
    study_vit = groups.get((epochs, 'vit', 'study'))
    best_cnn = max(cnns.items(), key=lambda item: item[1]) if cnns else None
    lines += [f'**{epochs} epochs**' + (
        f' (best CNN: {runs.NAMES[best_cnn[0][1]]}, {best_cnn[0][2]}, '
        f'{best_cnn[1]:.1f}%)' if best_cnn else ''), '',
              '| Model | Recipe | Best test acc (%) | Final train acc (%) | '
              'Gap to the best CNN closed (points over the study ViT ± '
              'standard error) | Wall time (min; CPU unless named) |',
              '|---|---|---|---|---|---|']
    for key in sorted((k for k in groups if k[0] == epochs),
                      key=lambda k: (k[1] != 'vit', k[1], recipes.rank(k[2]))):
      group = groups[key]
      closed, recipe = '', key[2]
      if not recipes.ranked(group[0]):
        recipe += ' (pre-training: an online probe\'s accuracy)'
      elif key[1] == 'vit' and study_vit and best_cnn:
        study_mean = recipes.accuracies(study_vit).mean()
        share = (recipes.accuracies(group).mean() - study_mean) / (
            best_cnn[1] - study_mean)
        closed = f'{100 * share:.0f}%'
        if key[2] != 'study':
          closed += f' ({_gain(group, study_vit)})'
      lines.append(
          f'| {runs.NAMES[key[1]]} | {recipe} | '
          f'{_seed_cell(group, "best_test_accuracy")} | '
          f'{_seed_cell(group, "final_train_accuracy")} | {closed} | '
          f'{runs.wall_time_cell(group)} |')
    lines.append('')
  return '\n'.join(lines).rstrip()


def plot(records: list[dict], path: pathlib.Path):
  """Each ViT recipe's best test accuracy (mean ± std over its seeds; hollow
  where one seed ran), a row per recipe in the ablation's order and a
  panel per budget on one accuracy axis, against the CNNs' recipes (lines)."""
  plt = plotting.pyplot()
  budgets = sorted({r['epochs'] for r in records})
  groups = recipes.group_runs(records)
  shown = sorted({recipe for (_, model, recipe), group in groups.items()
                  if model == 'vit' and recipes.ranked(group[0])},
                 key=recipes.rank)
  fig, axes = plt.subplots(
      1, len(budgets), sharex=True, sharey=True, squeeze=False,
      figsize=(3.5 + 3.2 * len(budgets), 2.5 + 0.2 * len(shown)),
      layout='constrained')  # room for the legend below, whatever the rows
  cnn_recipes = [('study', 'tab:red', 'study'),
                 (recipes.recipe_name(recipes.CNN_AUGMENTED), 'tab:green',
                  'augmented')] + [
                     (recipes.recipe_name(ingredients), 'tab:purple',
                      '+ ' + ' + '.join(ingredients))
                     for ingredients in recipes.CNN_ROUND_THREE]
  legend = {}
  for ax, epochs in zip(axes[0], budgets):
    for row, recipe in enumerate(shown):
      if (epochs, 'vit', recipe) not in groups:
        continue
      accuracies = recipes.accuracies(groups[epochs, 'vit', recipe])
      seeds = len(accuracies)
      name = f'ViT-Tiny, {seeds} seed{"s" if seeds > 1 else ""}'
      legend[name] = ax.errorbar(
          accuracies.mean(), row,
          xerr=accuracies.std(ddof=1) if seeds > 1 else 0, fmt='o', ms=4,
          capsize=2, color='tab:blue',
          markerfacecolor='tab:blue' if seeds > 1 else 'white')
    for model, style in (('simple_cnn', '--'), ('small_resnet', ':')):
      for recipe, color, recipe_label in cnn_recipes:
        if (epochs, model, recipe) in groups:
          legend[f'{runs.NAMES[model]}, {recipe_label}'] = ax.axvline(
              recipes.accuracies(groups[epochs, model, recipe]).mean(),
              linestyle=style, color=color)
    ax.set_title(f'{epochs} epochs')
    ax.set_xlabel('best test accuracy (%)', fontsize=9)
    ax.grid(alpha=0.3, axis='x')
  if shown:
    axes[0][0].set_yticks(range(len(shown)),
                          [recipes.label(recipe, shown) for recipe in shown],
                          fontsize=7)
    axes[0][0].set_ylim(len(shown) - 0.5, -0.5)  # the ablation's order, down
  fig.suptitle('The ViT-Tiny\'s recipes on 5,000 CIFAR-10 images, against '
               'the CNNs\' (lines: their means over the seeds)', fontsize=10)
  ordered = sorted(legend, key=lambda name: not name.startswith('ViT'))
  fig.legend([legend[name] for name in ordered], ordered, fontsize=7,
             ncol=4, loc='outside lower center')
  plotting.save_figure(fig, path)


def summarize(workdir: pathlib.Path, budgets: list[int],
              landed: dict[str, dict],
              long_budgets: tuple[int, ...] = ()) -> list[dict]:
  """Writes results.json, ablation.png, budgets.png and the README's table,
  answer across budgets and missing runs from the runs finished in
  `workdir` or `landed`; returns their records."""
  records = recipes.load_runs(workdir, landed)
  planned = list(order.planned_runs(workdir, budgets, landed, long_budgets))
  minutes = {
      recipes.run_name(model, ingredients, epochs, seed): _cpu_minutes(
          records, model, ingredients, epochs)
      for model, ingredients, epochs, seed in planned}
  runs.write_summary(HERE, records, f'{workdir} or results.json', {
      'ablation table': table(records),
      'answer across budgets': budgets_lib.answer(records),
      'missing runs': runs.missing_runs(
          list(minutes), {recipes.record_name(r) for r in records}, minutes)},
                     {'ablation.png': plot, 'budgets.png': budgets_lib.plot})
  return records


def main(argv):
  del argv
  runs.catch_stop_signals()
  # Looking for a teacher's best checkpoint opens it with orbax, which logs
  # tens of INFO lines each time; the runner's output is its own lines.
  command.quiet_libraries()
  # The runner only reads its runs' folders (a teacher's best checkpoint
  # among them): the accelerator's memory is the runs'.
  jax.config.update('jax_platforms', 'cpu')
  args = flags.FLAGS
  workdir = pathlib.Path(args.workdir).absolute()
  budgets = runs.integers('epochs', args.epochs,
                          example='30,100 (the study\'s 30 first)')
  long_budgets = tuple(runs.integers('long_epochs', args.long_epochs,
                                     example='300')) if args.long_epochs else ()
  if args.hours and args.side_by_side > 1:
    sys.exit('error: --hours estimates one run at a time, from lone runs on '
             'this CPU; pass --side_by_side=1 with it, or leave --hours out.')
  landed = runs.landed(HERE / 'results.json', recipes.record_name)
  if not args.summarize_only:
    data_dir = pathlib.Path(args.data_dir).absolute()
    runs.require_cifar10_subset(data_dir)
    # Each run lands in results.json as it finishes: a session that ends
    # mid-run loses only that run on a fresh machine.
    train(workdir, data_dir, budgets, args.max_runs, landed,
          lambda: summarize(workdir, budgets, landed, long_budgets),
          long_budgets, args.side_by_side, args.long_first, args.hours)
  print(table(summarize(workdir, budgets, landed, long_budgets)))


def _define_flags():
  # Defined only when run: the tests import this module beside vit_jax's,
  # which define flags of the same names.
  flags.DEFINE_string('data_dir', '../shared/data/cifar10-5k',
                      'The 5k/1k CIFAR-10 subset.')
  flags.DEFINE_string('workdir', '/tmp/data_efficiency',
                      'One directory per run; never committed.')
  flags.DEFINE_list(
      'epochs', ['30', '100'], 'Training budgets, the study\'s first; 100 is '
      'the longer one that fits this machine (a 200-epoch ViT run is ~2 h on '
      '2 cores); --epochs=30,200 where a GPU is.')
  flags.DEFINE_list(
      'long_epochs', ['300', '1000'], 'Budgets for the two best ViT recipes '
      "and each CNN's best, 3 seeds, after everything else but round two's "
      'weakest rows (recipes.ROUND_TWO_LATE); at the longest of several, '
      'after those rows, the best ViT recipe and the best CNN, seed 0, and '
      "seeds 1 and 2 if the ViT's seed 0 came within 4 points of the best "
      "CNN's (order.WITHIN_REACH; a ViT run takes about 2 h at 300 epochs and "
      '6 h at 1,000 on 2 cores); empty: none.')
  flags.DEFINE_integer('max_runs', 0, 'Stop after this many new runs; 0: '
                       'all.')
  flags.DEFINE_integer(
      'side_by_side', 1, 'Runs trained at once (experiments/side_by_side.py): '
      'several small runs may share a GPU sooner than they follow each '
      'other; 1 on a 2-core CPU.', lower_bound=1)
  flags.DEFINE_bool(
      'long_first', False, 'Train the --long_epochs rows first, chosen from '
      'the runs finished now (at the longest of several, seed 0 alone; '
      'the end decides on more): for a lent GPU, while this CPU trains '
      'the rest.')
  flags.DEFINE_float(
      'hours', 0, 'Train only the runs expected to end within this many '
      'hours, each with the runs it reads and has to train first (a '
      "pre-training, a teacher gone with another machine's workdir), at "
      "the records' minutes per epoch times this machine's pace (the "
      "median of its finished runs' minutes against the records' estimate "
      'of them): for a machine that goes away '
      'with its workdir, where a run cut off is lost; the others are '
      'passed over, each with its reason. One run at a time '
      '(--side_by_side=1). 0: every run.', lower_bound=0)
  flags.DEFINE_bool('summarize_only', False, 'Only summarise finished runs.')


if __name__ == '__main__':
  _define_flags()
  app.run(main)
