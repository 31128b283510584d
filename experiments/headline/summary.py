"""The headline's results.json and README sections, from the sweep's runs."""

import pathlib
import sys

from experiments import runs
from experiments.data_efficiency import budgets
from experiments.data_efficiency import recipes as r
from experiments.headline import sweep

HERE = pathlib.Path(__file__).resolve().parent


def described(model: str, ingredients: tuple[str, ...]) -> str:
  """A row's model for what it is: a ViT by what its CNN teaches it."""
  return (budgets.named(r.recipe_name(ingredients), untaught='a pure ViT')
          if model == 'vit' else f'the {runs.NAMES[model]}')


def _require(workdir: pathlib.Path, stage: int, planned: list[tuple],
             file: str = 'summary.json'):
  sweep.require(workdir, planned, f'runs of stage {stage}',
                f'run stage {stage} of experiments.headline.sweep first', file)


def _chained(by_name: dict[str, dict], run: tuple) -> dict:
  """`run`'s record with the FLOPs and minutes of its chain (`sweep.chain`)."""
  chain = [by_name[r.run_name(*x)] for x in sweep.chain(run)]
  costs = ('train_flops', 'wall_minutes')
  return {**chain[-1], **{key: sum(x[key] for x in chain) for key in costs}}


def _seeds_in_words(seeds: list[int]) -> str:
  *rest, last = map(str, seeds)
  return f'seeds {", ".join(rest)} and {last}' if rest else f'seed {last}'


# The JPEG copy's test images other than the study's 1,000: no choice, here
# or in data_efficiency, has seen them.
_OTHERS = 'test_9000_jpeg'
# The test sets of the table's columns; the comparisons are on the last two.
_TEST_SETS = {
    sweep.STUDY_TEST: "the study's 1,000 as JPEG",
    sweep.STUDY_TEST_EXACT: "the study's 1,000 pixel-exact",
    _OTHERS: 'the other 9,000 (JPEG)'
}


def _accuracy(record: dict, test_set: str) -> float:
  if test_set == sweep.STUDY_TEST:
    return record['test_accuracy_at_best_step']
  if test_set == _OTHERS:  # the 10,000 less the study's 1,000 as JPEG
    whole = record[sweep.JPEG_TEST]
    part = record[sweep.STUDY_TEST_EXACT]['examples']  # the same images
    return ((whole['top1'] * whole['examples'] -
             record['test_accuracy_at_best_step'] * part) /
            (whole['examples'] - part))
  return record[test_set]['top1']


def table(rows: dict[str, list[dict]], names: dict[str, str]) -> str:
  """A row per group of seeds; a ViT's FLOPs and minutes are its chain's."""
  return runs.markdown_table([
      'Model', 'Recipe', 'Epochs', 'Seeds', 'Validation acc at best (%)',
      *(f'Test acc there, {words} (%)'
        for words in _TEST_SETS.values()), 'Training TFLOPs', 'Wall time (min)'
  ], [[
      names[row][0].upper() + names[row][1:], group[0]['recipe'], '/'.join(
          map(str, sorted({x['epochs'] for x in group}))),
      len(group), '' if row == 'class_head' else runs.mean_std(
          [x['best_validation_accuracy'] for x in group]),
      *(runs.mean_std([_accuracy(x, test_set) for x in group])
        for test_set in _TEST_SETS),
      *(cell(group) for cell in (runs.tflops_cell, runs.wall_time_cell))
  ] for row, group in rows.items()])


def comparisons(rows: dict[str, list[dict]], names: dict[str, str],
                choose_on: list[int]) -> str:
  """Paired per-seed test accuracy on the 9,000 no choice saw, the study's."""
  pairs = [('The headline', 'vit', 'cnn'),
           ('Without a CNN', 'no_cnn_vit', 'cnn'),
           ('What the CNN contributes', 'vit', 'no_cnn_vit'),
           ('What the compute buys', 'vit', 'flops_matched_cnn'),
           ('What the class head alone predicts', 'class_head', 'two_heads')]
  names = dict(names, class_head='its class head alone',
               two_heads='the average of its two heads')
  rows = {**rows, 'two_heads': rows['vit']}

  # The seeds that chose the rows favour them (the best of several
  # candidates on their validation images); the others do not.
  reported = {x['seed'] for x in rows['vit']}
  unchosen = sorted(reported - set(choose_on))
  if 1 < len(unchosen) < len(reported):
    pairs.append((f'The headline on {_seeds_in_words(unchosen)} alone, '
                  'which chose nothing', 'vit', 'cnn', unchosen))

  def on(test_set: str, a: str, b: str, seeds=None) -> str:
    accuracy = [{
        x['seed']: _accuracy(x, test_set) for x in rows[row]
        if seeds is None or x['seed'] in seeds
    } for row in (a, b)]
    return (f'on {_TEST_SETS[test_set]}, '
            f'{runs.compared(names[a], accuracy[0], names[b], accuracy[1])}')

  return '\n'.join(f'- {title}: {on(_OTHERS, *pair)}; '
                   f'{on(sweep.STUDY_TEST_EXACT, *pair)}.'
                   for title, *pair in pairs)


def _described(name: str) -> dict:
  # What a run's name, MODEL_study+INGREDIENTS_eEPOCHS_seedSEED, says of it:
  # a run of other epochs, or choosing on other images (another
  # experiment's), is left out.
  model, after = name.split('_study')
  ingredients, rest = after.rsplit('_e', 1)
  return dict(model=model, recipe='study' + ingredients,
              epochs=int(rest.split('_')[0]),
              chosen_on='test' if r.PRETRAINING in name else 'validation')


def so_far(workdir: pathlib.Path, folder: pathlib.Path, *_) -> tuple:
  """The runs finished yet and a list of them, to commit as they land."""
  names = sorted(p.parent.name for p in workdir.glob('*_study*/summary.json'))
  found = runs.load_records(workdir, {n: _described(n) for n in names},
                            folder / 'results.json', r.record_name)
  return found, {
      'headline table': f'{len(found)} runs have finished (their records: '
                        'results.json, metrics.jsonl):\n\n' +
                        '\n'.join(f'- `{name}`' for name in found),
      'comparisons': 'The comparisons come when every run has finished.'
  }


def complete(workdir: pathlib.Path, folder: pathlib.Path, seeds: list[int],
             choose_on: list[int]) -> tuple:
  """The runs the sections need, and the headline's table and comparisons."""
  # The choosing seeds' candidates are read even where --seeds leaves those
  # seeds out: they chose the rows.
  every = list(dict.fromkeys(choose_on + seeds))
  stages = {}
  for stage in (1, 2, 3):
    stages[stage] = sweep.stage_runs(stage, seeds if stage == 3 else every,
                                     choose_on, workdir)
    _require(workdir, stage, stages[stage])
  rows = sweep.reported(workdir, seeds, choose_on)
  evaluations = sweep.evaluations(workdir, seeds, choose_on)
  for name in dict.fromkeys(name for _, name in evaluations):
    _require(workdir, 4, [run for run, n in evaluations if n == name],
             f'{name}.json')
  row_of = {run: row for row, planned in rows.items() for run in planned}
  descriptions = {}
  for run in sum(stages.values(), []):
    descriptions[r.run_name(*run)] = dict(model=run[0],
                                          recipe=r.recipe_name(run[1]),
                                          row=row_of.get(run), epochs=run[2])
  for run, name in evaluations:
    if (evaluation := sweep.evaluated(workdir, run, name)) is None:
      sys.exit(f'error: {workdir / r.run_name(*run)}/{name}.json is not of the '
               "run's best state: run stage 4 of experiments.headline.sweep "
               'again.')
    descriptions[r.run_name(*run)][name] = evaluation
  found = runs.load_records(workdir, descriptions, folder / 'results.json',
                            r.record_name)
  # A record committed by --so_far stands for no run left out above: it
  # lacks the row and the evaluations.
  stale = lambda n: not found.get(n, {}).items() >= descriptions[n].items()
  if left_out := list(filter(stale, descriptions)):
    sys.exit(f'error: the summary needs the runs left out above (one: '
             f'{left_out[0]}).')
  grouped = {
      row: [_chained(found, run) for run in planned]
      for row, planned in rows.items()
  }
  head = sweep.CLASS_HEAD_PREFIX
  grouped['class_head'] = [
      dict(x, test_accuracy_at_best_step=x[head + sweep.STUDY_TEST]['top1'],
           **{k: x[head + k] for k in (sweep.STUDY_TEST_EXACT, sweep.JPEG_TEST)})
      for x in grouped['vit']
  ]
  names = {row: described(*planned[0][:2]) for row, planned in rows.items()}
  names['flops_matched_cnn'] += " at the ViT chain's FLOPs"
  names['class_head'] = "the first row's class head alone"
  return found, {
      'headline table':
          f'Chosen on the validation accuracy of {_seeds_in_words(choose_on)} '
          "(each candidate's, summed over them); every row is over "
          f'{_seeds_in_words(seeds)}.\n\n{table(grouped, names)}',
      'comparisons': comparisons(grouped, names, choose_on)
  }


def main(argv=None):
  runs.catch_stop_signals()
  parser = runs.parser(__doc__, '/tmp/headline')
  sweep.add_seed_flags(parser)
  parser.add_argument('--folder', type=pathlib.Path, default=HERE,
                      help='Where README.md and results.json are.')
  parser.add_argument(
      '--so_far', action='store_true', help='List the runs finished yet and '
      'write their records, to commit them before the sweep ends.')
  args = parser.parse_args(argv)
  found, sections = (so_far if args.so_far else complete)(
      args.workdir, args.folder, args.seeds, args.choose_on)
  logs = runs.logged_metrics(args.folder, args.workdir, found, r.record_name)
  runs.write_summary(args.folder, list(found.values()), str(args.workdir),
                     lambda _: sections,
                     {'metrics.jsonl': runs.metrics_file(logs, r.record_name)})


if __name__ == '__main__':
  main()
