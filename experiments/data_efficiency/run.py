r"""How much of the ViT's gap to the CNNs the data-efficiency techniques close
on the study's 5,000 CIFAR-10 images.

  python experiments/data_efficiency/run.py \
      --data_dir=../shared/data/cifar10-5k --workdir=/tmp/data_efficiency

Trains `configs/data_efficient.py` with its techniques turned on one at a
time, from the study's recipe (all off) to the full one, for the ViT; the
CNNs with the study's recipe and with the same augmentations; at every
budget in --epochs; seeds as `planned_runs` orders them (the rows that carry
the conclusion get three). Round two adds ingredients from the literature
(`ROUND_TWO`), then trains the two best ViT recipes and each CNN's best,
three seeds each, at each budget of --long_epochs. One `vit_jax.main`
process per run; rerunning
skips the runs finished in --workdir or recorded in the committed
`results.json`, and resumes an interrupted one. After each run it writes,
next to this file, `results.json` (one record per run), `ablation.png`,
and the tables and the runs still missing inside `README.md`.
--summarize_only skips training; --max_runs stops after that many new runs
(a teacher or pre-training trained again counts as one).
"""

import pathlib
import sys
from typing import Callable

from absl import app
from absl import flags
import numpy as np

from experiments import runs
from vit_jax import models
from vit_jax.analysis import plotting

HERE = pathlib.Path(__file__).resolve().parent
# Every run trains on the study's subset.
TRAIN_EXAMPLES = 5000
# Each ingredient's config changes, in the order the ablation adds them; a
# recipe is the study's plus some of them, named by the ingredients it adds.
INGREDIENTS = dict([
    ('trivial_augment', {'auto_augment': 'trivial_augment'}),
    ('random_erasing', {'random_erasing': 0.25}),
    ('mixup_cutmix', {'mixup_alpha': 0.8, 'cutmix_alpha': 1.0}),
    # In place of dropout, as DeiT.
    ('stochastic_depth', {'model_overrides.stochastic_depth_rate': 0.1,
                          'model_overrides.dropout_rate': 0.0}),
    ('spt_lsa', {'model_overrides.shifted_patches': True,
                 'model_overrides.locality_attention': True}),
    ('distillation', {'model_overrides.distillation_token': True}),
    # Round two (issue 37).
    ('mimetic', {'model_overrides.mimetic_init': True}),
    # DeiT's and Lee et al.'s: 0.05, not on biases, norms, embeddings.
    ('reference_decay', {'weight_decay': 0.05, 'weight_decay_on': 'kernels'}),
    # Li et al.'s blocks (start, middle, end) imitate the teacher's three
    # stages (the SimpleCNN's: 32x32x32, 16x16x64, 8x8x128).
    ('locality_guidance', {
        'model_overrides.guided_blocks': (0, 3, 5),
        'model_overrides.guidance_widths': models.SimpleCNN().feature_widths}),
    # Masked-autoencoder pre-training without labels (He et al. 2022), as
    # MAE pre-trains: 75% of the patches hidden, normalised pixels, no
    # dropout, weight decay 0.05, Adam's beta2 0.95; a decoder of 2 blocks
    # as wide as the encoder (MAE's ablation: one block fine-tunes as well as
    # eight). Its run is read by the 'mae' rows (`SOURCES`) alone.
    ('mae_pretraining', {
        'model_overrides.mae_mask_ratio': 0.75,
        'model_overrides.mae_decoder_depth': 2,
        'model_overrides.mae_decoder_width': 128,
        'model_overrides.dropout_rate': 0.0,
        'weight_decay': 0.05, 'adam_b2': 0.95}),
    # Fine-tuned from that pre-training (of the same budget and seed).
    ('mae', {}),
])
# What configs/data_efficient.py sets that the study's recipe does not.
STUDY_OFF = {
    'auto_augment': 'none', 'random_erasing': 0, 'mixup_alpha': 0,
    'cutmix_alpha': 0, 'model_overrides.stochastic_depth_rate': 0,
    'model_overrides.dropout_rate': 0.1,
    'model_overrides.shifted_patches': False,
    'model_overrides.locality_attention': False,
}
# Round one's ingredients, the cumulative ablation's.
ALL = ('trivial_augment', 'random_erasing', 'mixup_cutmix', 'stochastic_depth',
       'spt_lsa', 'distillation')
# The ablation adds the ingredients one at a time; the architecture changes
# and distillation, which the augmentations hide at 30 epochs, are also
# tried on the study's recipe, alone and together. The CNNs take the
# augmentations.
CUMULATIVE = [ALL[:i] for i in range(len(ALL) + 1)]
ON_STUDY = [('spt_lsa',), ('distillation',), ('spt_lsa', 'distillation')]
CNN_AUGMENTED = ALL[:3]
# The CNN a ViT learns from: the teacher of distillation and the CNN whose
# stage features locality guidance imitates, trained with the study's recipe
# at the same budget and seed.
TEACHER = 'simple_cnn'
# The ingredients that read another run of the same budget and seed: the
# config field that names it, and that run's model and ingredients.
SOURCES = {
    'distillation': ('distillation_teacher', (TEACHER, ())),
    'locality_guidance': ('locality_guidance_teacher', (TEACHER, ())),
    'mae': ('init_from', ('vit', ('mae_pretraining',))),
}
# The ingredient of runs that only other runs read: planned just before the
# first run that reads each, not ranked among the recipes (their accuracy
# is a probe's).
PRETRAINING = 'mae_pretraining'
# Round two: levers from the literature that leave the ViT pure at
# inference, each on the study's recipe and on the best recipe when it was
# added: distillation for the first three; for MAE locality guidance
# alone (61.5% at 30 epochs and seed 0; 62.4% with distillation), since a
# pre-trained encoder lacks the distillation token. Locality guidance, the
# best at 30 epochs, first.
ROUND_TWO = [('locality_guidance',), ('distillation', 'locality_guidance'),
             ('mimetic',), ('distillation', 'mimetic'), ('reference_decay',),
             ('distillation', 'reference_decay'), ('mae',),
             ('locality_guidance', 'mae')]
# Round two's rows that train before a budget's seeds: locality guidance's
# (63% of the gap at 30 epochs, seed 0 62%), so that a longer budget's
# three-seed conclusion does not wait for the levers that added little at
# 30, nor for MAE's pre-training (a second budget of training, for a point
# more than guidance alone at 30). The others train after those seeds; one
# of them that seed 0 then ranks best gets its seeds too.
ROUND_TWO_FIRST = ROUND_TWO[:2]


def recipe_name(ingredients: tuple[str, ...]) -> str:
  return '+'.join(('study',) + ingredients)


# The tables' and the figure's order of the recipes.
ORDER = [recipe_name(r) for r in CUMULATIVE + ON_STUDY + ROUND_TWO]


def _rank(recipe: str) -> int:
  return ORDER.index(recipe) if recipe in ORDER else len(ORDER)


def _label(recipe: str, shown: list[str]) -> str:
  """'study'; '+ X' for a step of the ablation whose previous step is also
  in `shown`; 'study + X alone' and 'study + X + Y' for the recipes tried on
  the study's; and for a step shown without its previous one, a name that
  reads alone ('full recipe without distillation')."""
  ingredients = _ingredients(recipe)
  if not ingredients:
    return 'study'
  if ingredients in ON_STUDY + ROUND_TWO:
    return 'study + ' + ' + '.join(ingredients) + (
        ' alone' if len(ingredients) == 1 else '')
  if len(ingredients) > 1 and recipe_name(ingredients[:-1]) not in shown:
    if ingredients == ALL:
      return f'full recipe + {ALL[-1]}'
    if ingredients == ALL[:-1]:
      return f'full recipe without {ALL[-1]}'
    return f'study + {ingredients[0]} ... + {ingredients[-1]}'
  return f'+ {ingredients[-1]}'


def _needs_teacher(ingredients: tuple[str, ...]) -> bool:
  return any(SOURCES[name][1][0] == TEACHER for name in ingredients
             if name in SOURCES)


def _ranked(record: dict) -> bool:
  """Whether a run is a recipe of its own, not a pre-training."""
  return PRETRAINING not in _ingredients(record['recipe'])


def recipe_overrides(model: str, ingredients: tuple[str, ...]) -> dict:
  overrides = {k: v for k, v in STUDY_OFF.items()
               if model == 'vit' or not k.startswith('model_overrides.')}
  for name in ingredients:
    overrides.update(INGREDIENTS[name])
  return overrides


def run_name(model: str, ingredients: tuple[str, ...], epochs: int,
             seed: int) -> str:
  return f'{model}_{recipe_name(ingredients)}_e{epochs}_seed{seed}'


def _ingredients(recipe: str) -> tuple[str, ...]:
  return tuple(recipe.split('+')[1:])


def record_name(record: dict) -> str:
  """The name of the run a results.json record comes from."""
  return run_name(record['model'], _ingredients(record['recipe']),
                  record['epochs'], record['seed'])


def conclusion_rows(records: list[dict], epochs: int) -> list[tuple]:
  """(model, ingredients) of the rows that carry the conclusion at a budget,
  in the order their seeds train: the teacher where a row needs it
  (`SOURCES`), then the three rows the share of the gap is computed
  from (the ViT's study recipe, and its best recipe and the best CNN, model
  and recipe, as seed 0 ranks them), then the ViT's full recipe, then any
  row with seeds already run (a former best, which keeps its three)."""
  study, full = CUMULATIVE[0], CUMULATIVE[-1]
  at_budget = [r for r in records if r['epochs'] == epochs and _ranked(r)]
  seed_zero = [r for r in at_budget if r['seed'] == 0]
  rows = [('vit', study)]
  for kind in (('vit',), ('simple_cnn', 'small_resnet')):
    candidates = [r for r in seed_zero if r['model'] in kind]
    if candidates:
      best = max(candidates, key=lambda r: r['best_test_accuracy'])
      rows.append((best['model'], _ingredients(best['recipe'])))
  rows.append(('vit', full))
  rows += [(r['model'], _ingredients(r['recipe'])) for r in at_budget
           if r['seed']]
  if any(_needs_teacher(ingredients) for _, ingredients in rows):
    rows.insert(0, (TEACHER, study))
  return list(dict.fromkeys(rows))


def long_rows(records: list[dict], epochs: int) -> list[tuple]:
  """(model, ingredients) of the rows trained at the long budgets: the two
  best ViT recipes and each CNN's best recipe at `epochs` (the longest
  comparison budget), by their mean best test accuracy over the seeds run;
  the teacher first where a ViT row needs it. Empty before any ran."""
  means = {key: float(_accuracies(group).mean())
           for key, group in group_runs(filter(_ranked, records)).items()
           if key[0] == epochs}

  def best(model):
    return sorted(((accuracy, recipe) for (_, m, recipe), accuracy
                   in means.items() if m == model), reverse=True)

  rows = [('vit', _ingredients(recipe)) for _, recipe in best('vit')[:2]]
  rows += [(model, _ingredients(best(model)[0][1]))
           for model in ('simple_cnn', 'small_resnet') if best(model)]
  if any(_needs_teacher(ingredients) for _, ingredients in rows):
    rows.insert(0, (TEACHER, ()))
  return list(dict.fromkeys(rows))


def planned_runs(workdir: pathlib.Path, budgets: list[int],
                 landed: dict[str, dict] | None = None,
                 long_budgets: tuple[int, ...] = ()):
  """`_rows_in_order`, each run just after the pre-training it reads
  (`SOURCES`), the first time one does."""
  planned = set()
  for model, ingredients, epochs, seed in _rows_in_order(
      workdir, budgets, landed, long_budgets):
    sources = [(*SOURCES[i][1], epochs, seed) for i in ingredients
               if i in SOURCES and PRETRAINING in SOURCES[i][1][1]]
    for run in sources + [(model, ingredients, epochs, seed)]:
      if run not in planned:
        planned.add(run)
        yield run


def _rows_in_order(workdir: pathlib.Path, budgets: list[int],
                   landed: dict[str, dict] | None,
                   long_budgets: tuple[int, ...]):
  """(model, ingredients, epochs, seed), most informative first: at the
  first budget, the teacher, the ViT's study and full recipes (without and
  with distillation) and distillation alone, the other steps and
  combinations, and the CNNs with both recipes (seed 0); at each longer
  budget the same without the other steps; then, budget by budget,
  `ROUND_TWO_FIRST` (seed 0), so that one of them can carry the conclusion,
  seeds 1 and 2 of `conclusion_rows` (chosen when the runner gets there,
  from the seed-0 runs then finished, in `workdir` or `landed`), the rest
  of round two and the seeds of a row it makes the best: a short budget's
  conclusion lands before the longer budgets' rows; last, the
  other steps at the longer budgets. Then, at
  each of `long_budgets`, `long_rows` with seeds 0, 1 and 2 (chosen when
  the runner gets there)."""
  study, full = CUMULATIVE[0], CUMULATIVE[-1]
  key_rows = [study, CUMULATIVE[-2], full, ('distillation',)]
  between = [r for r in ON_STUDY + CUMULATIVE[1:-2] if r not in key_rows]
  first, *longer = budgets

  def seed_zero(epochs, ablation):
    yield TEACHER, study, epochs, 0
    for ingredients in key_rows + ablation:
      yield 'vit', ingredients, epochs, 0
    for model in ('simple_cnn', 'small_resnet'):
      for ingredients in (study, CNN_AUGMENTED):
        if (model, ingredients) != (TEACHER, study):
          yield model, ingredients, epochs, 0

  yield from seed_zero(first, between)
  for epochs in longer:
    yield from seed_zero(epochs, [])
  round_two_rest = [r for r in ROUND_TWO if r not in ROUND_TWO_FIRST]
  for epochs in budgets:
    for round_two in (ROUND_TWO_FIRST, round_two_rest):
      for ingredients in round_two:
        yield 'vit', ingredients, epochs, 0
      rows = conclusion_rows(load_runs(workdir, landed), epochs)
      for seed in (1, 2):
        for model, ingredients in rows:
          yield model, ingredients, epochs, seed
  for epochs in longer:
    for ingredients in between:
      yield 'vit', ingredients, epochs, 0
  for epochs in long_budgets:
    rows = long_rows(load_runs(workdir, landed), budgets[-1])
    for seed in (0, 1, 2):
      for model, ingredients in rows:
        yield model, ingredients, epochs, seed


def train(workdir: pathlib.Path, data_dir: pathlib.Path, budgets: list[int],
          max_runs: int, landed: dict[str, dict] | None = None,
          after_each_run: Callable[[], None] = lambda: None,
          long_budgets: tuple[int, ...] = ()):
  """Trains the planned runs finished neither in `workdir` nor in `landed`
  (the committed records), at most `max_runs` new runs (0: all), calling
  `after_each_run` as each finishes."""
  for count, (directory, model, recipe, overrides) in enumerate(
      _unfinished_runs(workdir, budgets, landed or {}, long_budgets)):
    if max_runs and count == max_runs:
      return
    runs.train(directory, f'configs/data_efficient.py:{model}',
               {'data_dir': data_dir, **overrides},
               {'recipe': recipe, 'train_examples': TRAIN_EXAMPLES})
    after_each_run()


def _unfinished_runs(workdir: pathlib.Path, budgets: list[int],
                     landed: dict[str, dict], long_budgets: tuple[int, ...]):
  """(directory, model, recipe, overrides) of each planned run not yet
  finished, in order; first, the run it reads (`SOURCES`: the teacher of a
  distilled or guided run, an MAE's pre-training) where only that run's
  record landed. Lazy: a source is looked for after the runs before it have
  trained."""
  for model, ingredients, epochs, seed in planned_runs(workdir, budgets,
                                                       landed, long_budgets):
    name = run_name(model, ingredients, epochs, seed)
    if name in landed or runs.finished(workdir / name):
      continue
    overrides = _run_overrides(model, ingredients, epochs, seed)
    for field, (source_model, source_ingredients) in (
        SOURCES[i] for i in ingredients if i in SOURCES):
      source = workdir / run_name(source_model, source_ingredients, epochs,
                                  seed)
      if source.name in landed and not runs.finished(source):
        # The run needs the checkpoint, gone with the workdir its record
        # came from; the retrained run's record replaces it.
        print(f'retraining {source.name}: its checkpoint is not in '
              f'{workdir}', flush=True)
        yield (source, source_model, recipe_name(source_ingredients),
               _run_overrides(source_model, source_ingredients, epochs, seed))
      if not runs.finished(source):
        sys.exit(f'error: {source}, which {name} reads, has not finished.')
      overrides[field] = source
    yield workdir / name, model, recipe_name(ingredients), overrides


def _run_overrides(model: str, ingredients: tuple[str, ...], epochs: int,
                   seed: int) -> dict:
  return {'num_epochs': epochs, 'seed': seed,
          **recipe_overrides(model, ingredients)}


def load_runs(workdir: pathlib.Path,
              landed: dict[str, dict] | None = None) -> list[dict]:
  """The records of the runs finished in `workdir`, and of those in `landed`
  that `workdir` does not hold."""
  records = runs.load_records(workdir, landed or {}, record_name)
  return sorted(records.values(), key=lambda r: (
      r['epochs'], r['model'], _rank(r['recipe']), r['seed']))


def group_runs(records: list[dict]) -> dict[tuple, list[dict]]:
  """The seeds of each row: (epochs, model, recipe) -> its runs."""
  groups = {}
  for r in records:
    groups.setdefault((r['epochs'], r['model'], r['recipe']), []).append(r)
  return groups


def _accuracies(group: list[dict]) -> np.ndarray:
  return 100 * np.array([r['best_test_accuracy'] for r in group])


def _gain(group: list[dict], study: list[dict]) -> str:
  """Points over the study-recipe ViT, with the standard error of the
  difference of the two means where both rows have seeds to estimate it."""
  a, b = _accuracies(group), _accuracies(study)
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
  groups = group_runs(records)
  lines = []
  for epochs in sorted({r['epochs'] for r in records}):
    cnns = {key: _accuracies(group).mean() for key, group in groups.items()
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
                      key=lambda k: (k[1] != 'vit', k[1], _rank(k[2]))):
      group = groups[key]
      closed, recipe = '', key[2]
      if not _ranked(group[0]):
        recipe += ' (pre-training: an online probe\'s accuracy)'
      elif key[1] == 'vit' and study_vit and best_cnn:
        study_mean = _accuracies(study_vit).mean()
        share = (_accuracies(group).mean() - study_mean) / (
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
  plt = plotting.pyplot()
  budgets = sorted({r['epochs'] for r in records})
  fig, axes = plt.subplots(1, len(budgets), figsize=(7 * len(budgets), 4.5),
                           squeeze=False)
  groups = group_runs(records)
  for ax, epochs in zip(axes[0], budgets):
    vit = {recipe: _accuracies(group)
           for (e, model, recipe), group in groups.items()
           if (e, model) == (epochs, 'vit') and _ranked(group[0])}
    recipes = sorted(vit, key=_rank)
    labels = [_label(recipe, recipes) for recipe in recipes]
    ax.bar(range(len(recipes)), [vit[r].mean() for r in recipes],
           yerr=[vit[r].std(ddof=1) if len(vit[r]) > 1 else 0
                 for r in recipes], color='tab:blue', label='ViT-Tiny')
    for model, style in (('simple_cnn', '--'), ('small_resnet', ':')):
      for recipe, color, name in (('study', 'tab:red', 'study'),
                                  (recipe_name(CNN_AUGMENTED), 'tab:green',
                                   'augmented')):
        if (epochs, model, recipe) in groups:
          ax.axhline(_accuracies(groups[epochs, model, recipe]).mean(),
                     linestyle=style, color=color,
                     label=f'{runs.NAMES[model]}, {name}')
    ax.set_xticks(range(len(recipes)), labels, rotation=30, ha='right',
                  fontsize=8)
    ax.set_xlim(-0.6, len(ORDER) - 0.4)  # bars as wide in every panel
    ax.set_ylabel('best test accuracy (%), mean over seeds')
    ax.set_title(f'{epochs} epochs, 5,000 CIFAR-10 images')
    ax.set_ylim(0, 100)  # room above the bars and lines for the legend
    ax.legend(fontsize=7, loc='upper left', ncol=3)
    ax.grid(alpha=0.3, axis='y')
  fig.tight_layout()
  plotting.save_figure(fig, path)


def summarize(workdir: pathlib.Path, budgets: list[int],
              landed: dict[str, dict],
              long_budgets: tuple[int, ...] = ()) -> list[dict]:
  """Writes results.json, ablation.png and the README's table and missing
  runs from the runs finished in `workdir` or `landed`; returns their
  records."""
  records = load_runs(workdir, landed)
  planned = list(planned_runs(workdir, budgets, landed, long_budgets))
  minutes = {run_name(model, ingredients, epochs, seed): runs.cpu_minutes(
      records, model, recipe_name(ingredients), epochs)
             for model, ingredients, epochs, seed in planned}
  runs.write_summary(HERE, records, f'{workdir} or results.json', {
      'ablation table': table(records),
      'missing runs': runs.missing_runs(
          list(minutes), {record_name(r) for r in records}, minutes)},
                     'ablation.png', plot)
  return records


def main(argv):
  del argv
  runs.catch_stop_signals()
  args = flags.FLAGS
  workdir = pathlib.Path(args.workdir).absolute()
  budgets = runs.integers('epochs', args.epochs,
                          example='30,100 (the study\'s 30 first)')
  long_budgets = tuple(runs.integers('long_epochs', args.long_epochs,
                                     example='300')) if args.long_epochs else ()
  landed = runs.landed(HERE / 'results.json', record_name)
  if not args.summarize_only:
    data_dir = pathlib.Path(args.data_dir).absolute()
    runs.require_cifar10_subset(data_dir)
    # Each run lands in results.json as it finishes: a session that ends
    # mid-run loses only that run on a fresh machine.
    train(workdir, data_dir, budgets, args.max_runs, landed,
          lambda: summarize(workdir, budgets, landed, long_budgets),
          long_budgets)
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
      'long_epochs', ['300'], 'Budgets for the two best ViT recipes and each '
      "CNN's best, 3 seeds, after everything else (about 3 h a ViT run on 2 "
      'cores; 1000 where a GPU is); empty: none.')
  flags.DEFINE_integer('max_runs', 0, 'Stop after this many new runs; 0: '
                       'all.')
  flags.DEFINE_bool('summarize_only', False, 'Only summarise finished runs.')


if __name__ == '__main__':
  _define_flags()
  app.run(main)
