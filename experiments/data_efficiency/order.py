"""Which runs the data-efficiency experiment trains, most informative
first, and what each reads: the rows that carry a budget's conclusion get
their seeds; the long budgets take the best rows."""

import itertools
import pathlib
import sys
from typing import Callable

from experiments import runs
from experiments.data_efficiency import recipes
from vit_jax.checkpoints import best_checkpoint


# Where runs the runner trains again go, out of its sight.
SET_ASIDE = 'set_aside'


def conclusion_rows(records: list[dict], epochs: int) -> list[tuple]:
  """(model, ingredients) of the rows that carry the conclusion at a budget,
  in the order their seeds train: the teachers the rows read
  (`recipes.teachers_read`), then the three rows the share of the gap is
  computed from (the ViT's study recipe, and its best recipe and the best
  CNN, model and recipe, as seed 0 ranks them), then the ViT's full recipe,
  then any row with seeds already run (a former best, which keeps its
  three)."""
  study, full = recipes.CUMULATIVE[0], recipes.CUMULATIVE[-1]
  at_budget = [r for r in records
               if r['epochs'] == epochs and recipes.ranked(r)]
  seed_zero = [r for r in at_budget if r['seed'] == 0]
  rows = [('vit', study)]
  for kind in (('vit',), ('simple_cnn', 'small_resnet')):
    candidates = [r for r in seed_zero if r['model'] in kind]
    if candidates:
      best = max(candidates, key=lambda r: r['best_test_accuracy'])
      rows.append((best['model'], recipes.ingredients_of(best['recipe'])))
  rows.append(('vit', full))
  rows += [(r['model'], recipes.ingredients_of(r['recipe'])) for r in at_budget
           if r['seed']]
  return list(dict.fromkeys(recipes.teachers_read(rows) + rows))


# At the longest budget, seeds 1 and 2 train only where the ViT's seed 0
# came this close (points) to the best CNN's there, so that three seeds
# could show a match: at 100 epochs two seeds of a row differ by up to 2.8
# points (the SmallResNet with TrivialAugment: 76.2 and 73.4), and the
# best ViT's and CNN's seed 0 differed by 3.8 points where their means by
# 1.7.
WITHIN_REACH = 4.0


def _best_first(records: list[dict], epochs: int,
                models: tuple[str, ...]) -> list[tuple]:
  """(model, ingredients) of the ranked rows of `models` at `epochs`, the
  best first (`recipes.standing`)."""
  standings = {key: recipes.standing(group)
               for key, group in recipes.group_runs(
                   filter(recipes.ranked, records)).items()
               if key[0] == epochs and key[1] in models}
  return [(model, recipes.ingredients_of(recipe)) for (_, model, recipe), _
          in sorted(standings.items(), key=lambda item: item[1],
                    reverse=True)]


def long_rows(records: list[dict], epochs: int,
              longest: bool = False) -> list[tuple]:
  """(model, ingredients) of the rows trained at a long budget: the two
  best ViT recipes and each CNN's best recipe at `epochs` (the longest
  comparison budget), as `recipes.standing` ranks them; `longest`: the
  best ViT recipe and the best CNN (model and recipe) alone. The teachers
  they read first. Empty before any ran."""
  vits = _best_first(records, epochs, ('vit',))
  if longest:
    rows = vits[:1] + _best_first(records, epochs,
                                  ('simple_cnn', 'small_resnet'))[:1]
  else:
    rows = vits[:2] + [best for model in ('simple_cnn', 'small_resnet')
                       for best in _best_first(records, epochs, (model,))[:1]]
  return list(dict.fromkeys(recipes.teachers_read(rows) + rows))


def _a_match_within_reach(records: list[dict], epochs: int,
                          vit: tuple) -> bool:
  """Whether the seed 0 of `vit` (model, ingredients) at `epochs` came
  within `WITHIN_REACH` points of the best CNN's seed 0 there."""
  seed_zero = [r for r in records if (r['epochs'], r['seed']) == (epochs, 0)
               and recipes.ranked(r)]
  vits = [100 * r['best_test_accuracy'] for r in seed_zero
          if (r['model'], recipes.ingredients_of(r['recipe'])) == vit]
  cnns = [100 * r['best_test_accuracy'] for r in seed_zero
          if r['model'] != 'vit']
  return bool(vits and cnns) and vits[0] >= max(cnns) - WITHIN_REACH


def planned_runs(workdir: pathlib.Path, budgets: list[int],
                 landed: dict[str, dict] | None = None,
                 long_budgets: tuple[int, ...] = (),
                 settle: Callable[[], None] = lambda: None,
                 long_first: bool = False):
  """`_rows_in_order`, each run after the runs it reads (a teacher, a
  pre-training: `recipes.source_runs`): a source not yet planned is
  planned just before its first reader. `settle` returns once the
  runs planned so far have finished: called before each choice made from
  the runs finished. `long_first`: the long budgets' rows
  (`_long_budget_rows`, chosen from the runs finished now, without waiting
  for any) before everything else, for a lent GPU while the CPU trains the
  rest; the same rows chosen again at the end train where the choice has
  changed."""
  planned = set()
  rows = _rows_in_order(workdir, budgets, landed, long_budgets, settle)
  if long_first:
    rows = itertools.chain(
        _long_budget_rows(workdir, budgets, landed, long_budgets, settle,
                          _longest(long_budgets), first=True),
        rows)
  for model, ingredients, epochs, seed in rows:
    sources = [tuple(source[1:]) for source in
               recipes.source_runs(ingredients, epochs, seed)]
    for run in sources + [(model, ingredients, epochs, seed)]:
      if run not in planned:
        planned.add(run)
        yield run


def _rows_in_order(workdir: pathlib.Path, budgets: list[int],
                   landed: dict[str, dict] | None,
                   long_budgets: tuple[int, ...], settle: Callable[[], None]):
  """(model, ingredients, epochs, seed), most informative first: at the
  first budget, the teacher, the ViT's study and full recipes (without and
  with distillation) and distillation alone, the other steps and
  combinations, and the CNNs with both recipes (seed 0); at each longer
  budget the same without the other steps; then, budget by budget,
  `recipes.ROUND_TWO_FIRST` (seed 0), so that one of them can carry the
  conclusion, seeds 1 and 2 of `conclusion_rows` (chosen when the runner
  gets there, from the seed-0 runs then finished, in `workdir` or
  `landed`), round three (at the last budget the levers on the ViT's best
  recipe, at the first `recipes.ROUND_THREE_FIRST_BUDGET`), after the CNNs
  with `recipes.CNN_ROUND_THREE` there (seed 0), the rest of round
  two, each followed by the seeds of a row it makes the best: a short
  budget's conclusion lands before the longer budgets' rows; last, the
  other steps at the longer budgets. Then the long budgets' rows
  (`_long_budget_rows`, chosen when the runner gets there),
  `recipes.ROUND_TWO_LATE` at the last budget after the three-seed long
  budgets, before the longest of several."""
  study, full = recipes.CUMULATIVE[0], recipes.CUMULATIVE[-1]
  key_rows = [study, recipes.CUMULATIVE[-2], full, ('distillation',)]
  between = [r for r in recipes.ON_STUDY + recipes.CUMULATIVE[1:-2]
             if r not in key_rows]
  first, *longer = budgets

  def seed_zero(epochs, ablation):
    yield recipes.TEACHER, study, epochs, 0
    for ingredients in key_rows + ablation:
      yield 'vit', ingredients, epochs, 0
    for model in ('simple_cnn', 'small_resnet'):
      for ingredients in (study, recipes.CNN_AUGMENTED):
        if (model, ingredients) != (recipes.TEACHER, study):
          yield model, ingredients, epochs, 0

  yield from seed_zero(first, between)
  for epochs in longer:
    yield from seed_zero(epochs, [])
  round_two_rest = [('vit', r) for r in recipes.ROUND_TWO
                    if r not in recipes.ROUND_TWO_FIRST]
  late = [('vit', r) for r in recipes.ROUND_TWO_LATE] if long_budgets else []

  def with_conclusion_seeds(stage, epochs):
    """`stage`'s rows at seed 0, then, once they finished, seeds 1 and 2
    of the rows that carry the conclusion then."""
    for model, ingredients in stage:
      yield model, ingredients, epochs, 0
    settle()
    rows = conclusion_rows(recipes.load_runs(workdir, landed), epochs)
    for seed in (1, 2):
      for model, ingredients in rows:
        yield model, ingredients, epochs, seed

  for epochs in budgets:
    last = epochs == budgets[-1]
    round_three = [('vit', ingredients) for ingredients in (
        recipes.ROUND_THREE if last else
        recipes.ROUND_THREE_FIRST_BUDGET if epochs == first else [])]
    cnns = [(model, ingredients) for ingredients in recipes.CNN_ROUND_THREE
            for model in ('simple_cnn', 'small_resnet')] if round_three else []
    for stage in ([('vit', r) for r in recipes.ROUND_TWO_FIRST], cnns,
                  round_three, [row for row in round_two_rest
                                if not (last and row in late)]):
      yield from with_conclusion_seeds(stage, epochs)
  for epochs in longer:
    for ingredients in between:
      yield 'vit', ingredients, epochs, 0
  longest = _longest(long_budgets)
  yield from _long_budget_rows(workdir, budgets, landed,
                               tuple(b for b in long_budgets if b != longest),
                               settle, longest)
  if late:
    yield from with_conclusion_seeds(late, budgets[-1])
  if longest:
    yield from _long_budget_rows(workdir, budgets, landed, (longest,),
                                 settle, longest)


def _longest(long_budgets: tuple[int, ...]) -> int | None:
  """The longest of several long budgets (1,000 epochs: a ViT run takes
  about 6 h on 2 cores), where fewer rows and seeds train."""
  return max(long_budgets) if len(long_budgets) > 1 else None


def _long_budget_rows(workdir: pathlib.Path, budgets: list[int],
                      landed: dict[str, dict] | None,
                      long_budgets: tuple[int, ...],
                      settle: Callable[[], None],
                      longest: int | None, first: bool = False):
  """At each of `long_budgets`, `long_rows` of the last comparison budget
  with seeds 0, 1 and 2, chosen from the runs finished when the runner
  gets there; at `longest` (`_longest` of all the long budgets), the best
  ViT recipe and the best CNN with seed 0, and with seeds 1 and 2 only
  where seed 0 brought a match within reach (`_a_match_within_reach`).
  `first` (`planned_runs`' `long_first`): seed 0 alone there, the choice
  of more left to the pass at the end, so that the runs after these do
  not wait for it."""
  for epochs in long_budgets:
    if not first:  # first, the comparison budget's runs wait behind these
      settle()
    records = recipes.load_runs(workdir, landed)
    rows = long_rows(records, budgets[-1], epochs == longest)
    vit = [(model, recipes.at_budget(ingredients, epochs)) for model,
           ingredients in _best_first(records, budgets[-1], ('vit',))[:1]]
    for seed in (0, 1, 2):
      if epochs == longest and seed == 1:
        if first:
          break
        settle()
        if not vit or not _a_match_within_reach(
            recipes.load_runs(workdir, landed), epochs, vit[0]):
          break
      for model, ingredients in rows:
        yield model, recipes.at_budget(ingredients, epochs), epochs, seed


# A run to train, with what it reads: (model, ingredients, epochs) each.
Chain = list[tuple[str, tuple[str, ...], int]]


def unfinished_runs(workdir: pathlib.Path, budgets: list[int],
                     landed: dict[str, dict], long_budgets: tuple[int, ...],
                     wait_for: Callable[[pathlib.Path], None] = lambda _: None,
                     settle: Callable[[], None] = lambda: None,
                     long_first: bool = False,
                     too_long: Callable[[Chain], str | None] = lambda _: None):
  """(directory, model, recipe, overrides) of each planned run not yet
  finished, in order; first, each run it reads (`recipes.source_runs`: the
  teacher of a distilled or guided run, an MAE's pre-training) that is not
  in `workdir` and was not yielded before (a pre-training always trains
  so, just before its reader; a teacher whose record alone landed, again),
  or that kept no best checkpoint where the run reads the best. A run is
  passed over, with the reason `too_long` gives for it and those sources
  (None: it trains), asked again after each source. Lazy: a run is
  yielded once `wait_for` returns for each run it reads (the runs before
  it, its sources among them, may train side by side), a choice made once
  `settle` returns (`planned_runs`, with `long_first`)."""
  tried = set()
  for model, ingredients, epochs, seed in planned_runs(
      workdir, budgets, landed, long_budgets, settle, long_first):
    name = recipes.run_name(model, ingredients, epochs, seed)
    if (name in landed or runs.finished(workdir / name) or
        recipes.PRETRAINING in ingredients):
      continue
    overrides = run_overrides(model, ingredients, epochs, seed)
    sources, first = [], {}  # two fields may read one run
    for field, *source_run in recipes.source_runs(ingredients, epochs, seed):
      source = workdir / recipes.run_name(*source_run)
      sources.append((field, source))
      if source.name in tried:  # finished, or training beside: waited for
        continue
      no_best = ('best_teacher' in ingredients and runs.finished(source)
                 and not best_checkpoint.kept_one(source))
      if no_best or not runs.finished(source):
        first[source] = (source_run, no_best)
    queue = list(first.items())
    while True:
      # Again after each source: what it took may change the estimate.
      reason = too_long([tuple(source_run[:3]) for _, (source_run, _) in
                         queue] + [(model, ingredients, epochs)])
      if reason or not queue:
        break
      source, (source_run, no_best) = queue.pop(0)
      if no_best:
        settle()  # the runs beside this one may be reading it
        print(f'retraining {source.name}, which kept no best checkpoint '
              f'(moved to {_set_aside(source)})', flush=True)
      elif source.name in landed:
        # Gone with the workdir its record came from; the retrained run's
        # record replaces it.
        print(f'training {source.name} again: the checkpoint its record '
              f'came from is not in {workdir} (a retraining stopped midway '
              'resumes)', flush=True)
      tried.add(source.name)
      yield (source, source_run[0], recipes.recipe_name(source_run[1]),
             run_overrides(*source_run))
    if reason:
      print(f'passing over {name}: {reason}', flush=True)
      continue
    for field, source in sources:
      wait_for(source)  # training beside the runs before this one
      if not runs.finished(source):
        sys.exit(f'error: {source}, which {name} reads, has not finished.')
      if ('best_teacher' in ingredients and
          not best_checkpoint.kept_one(source)):
        sys.exit(f'error: {source}, which {name} reads at its best, kept no '
                 'best checkpoint.')
      overrides[field] = source
    tried.add(name)
    yield workdir / name, model, recipes.recipe_name(ingredients), overrides


def _set_aside(run_dir: pathlib.Path) -> pathlib.Path:
  """Moves a run out of the runner's sight (its records are read from the
  workdir's folders), kept: `workdir/set_aside/<name>[.N]`."""
  folder = run_dir.parent / SET_ASIDE
  folder.mkdir(exist_ok=True)
  aside = folder / run_dir.name
  for n in itertools.count(1):
    if not aside.exists():
      break
    aside = folder / f'{run_dir.name}.{n}'
  run_dir.rename(aside)
  return aside


def run_overrides(model: str, ingredients: tuple[str, ...], epochs: int,
                   seed: int) -> dict:
  return {'num_epochs': epochs, 'seed': seed,
          **recipes.recipe_overrides(model, ingredients, epochs)}
