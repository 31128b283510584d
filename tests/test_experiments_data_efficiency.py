"""experiments/data_efficiency/run.py: its recipes, the order it trains the
runs in, and the table it writes."""

import functools
import subprocess
import sys
import time
import warnings

import pytest

from configs import cifar_small
from configs import data_efficient
from experiments.data_efficiency import budgets
from experiments.data_efficiency import order
from experiments.data_efficiency import recipes
from experiments.data_efficiency import run
from tests.helpers import ROOT
from tests.helpers import finished_run
from vit_jax import config_schema
from vit_jax import models
from vit_jax.checkpoints import best_checkpoint

MODELS = ('vit', 'simple_cnn', 'small_resnet')


def _recipe_config(model, ingredients, epochs=100):
  """configs/data_efficient.py with a recipe's overrides applied."""
  config = data_efficient.get_config(model)
  config.update_from_flattened_dict(
      recipes.recipe_overrides(model, ingredients, epochs))
  return config


def _assert_same_training(config, reference):
  """The same model (a field set to its default counts as unset) and the
  same everything else but what a teacher keeps."""
  assert models.from_config(config, 10) == models.from_config(reference, 10)
  config, reference = config.to_dict(), reference.to_dict()
  for key in ('model_overrides', *recipes.TEACHER_OVERRIDES):
    del config[key], reference[key]
  assert config == reference


def test_the_teacher_keeps_its_best_checkpoint_and_the_rows_read_it():
  assert _recipe_config(recipes.TEACHER, ()).keep_best_checkpoint
  for model, ingredients in recipes.TEACHERS.values():
    assert _recipe_config(model, ingredients).keep_best_checkpoint
  assert not _recipe_config('small_resnet', ()).keep_best_checkpoint
  assert not _recipe_config('vit', recipes.BEST).keep_best_checkpoint
  config = _recipe_config('vit', recipes.BEST + ('best_teacher',))
  assert config.teacher_checkpoint == 'best'


def test_stochastic_depth_grows_with_the_budget():
  rates = [_recipe_config('vit', ('budget_stochastic_depth',), epochs)
           .model_overrides.stochastic_depth_rate
           for epochs in (30, 100, 300, 1000)]
  assert rates == [0.048, 0.1, 0.148, 0.2]


@pytest.mark.parametrize('model', MODELS)
def test_the_study_recipe_is_the_study_config(model):
  study = cifar_small.get_config(model)
  _assert_same_training(_recipe_config(model, ()), study)


@pytest.mark.parametrize('model', MODELS)
def test_configs_data_efficient_is_the_full_recipe_without_distillation(
    model):
  ingredients = (recipes.CUMULATIVE[-2] if model == 'vit' else
                 recipes.CNN_AUGMENTED)
  _assert_same_training(
      _recipe_config(model, ingredients),
      data_efficient.get_config(model))


def _value(config, key):
  """The config's value of `key`; for a model field it leaves unset, the
  model's own."""
  try:
    return functools.reduce(getattr, key.split('.'), config)
  except AttributeError:
    return models.default_fields(config.model)[key.split('.')[-1]]


def test_each_ingredient_turns_on_what_the_study_leaves_off():
  study = _recipe_config('vit', ())
  for ingredient in recipes.INGREDIENTS:
    for key, value in recipes.changes(ingredient, epochs=100).items():
      assert _value(study, key) != value, (ingredient, key)


def _flat(tree: dict, prefix: str = '') -> dict:
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(_flat(value, f'{prefix}{key}.'))
    else:
      flat[prefix + key] = value
  return flat


@pytest.mark.parametrize('levers', recipes.ROUND_THREE,
                         ids=lambda levers: '+'.join(levers[2:]))
def test_round_three_adds_levers_to_the_best_recipe(levers):
  best, config = (_recipe_config('vit', ingredients)
                  for ingredients in (recipes.BEST, levers))
  for each in (best, config):  # the teachers the runner names (`SOURCES`)
    each.distillation_teacher = each.locality_guidance_teacher = '/teacher'
  config_schema.validate(config, num_devices=4)
  before, after = _flat(best.to_dict()), _flat(config.to_dict())
  changed = {key for key, value in after.items() if before.get(key) != value}
  assert levers[:len(recipes.BEST)] == recipes.BEST
  # A teacher of other stages changes the widths guidance imitates.
  assert changed == {key for lever in levers[len(recipes.BEST):]
                     for key in recipes.changes(lever, epochs=100)} | (
                         {'model_overrides.guidance_widths'}
                         if recipes.teacher(levers) != recipes.teacher(
                             recipes.BEST) else set())


def _fake_training(accuracies, trained):
  """A stand-in for `runs.train` that finishes each run at once, with the
  best test accuracy `accuracies` gives its (model, recipe, epochs), or its
  (model, recipe) at any budget (0.5 if none), and appends (run name,
  overrides) to `trained`."""
  def train(directory, config, overrides, description):
    model = config.split(':')[1]
    trained.append((directory.name, overrides))
    row = (model, description['recipe'])
    finished_run(directory, seed=overrides['seed'], model=model,
                 description=description,
                 epochs=float(overrides['num_epochs']),
                 best_test_accuracy=accuracies.get(
                     row + (overrides['num_epochs'],),
                     accuracies.get(row, 0.5)))
    if overrides.get('keep_best_checkpoint'):
      (directory / best_checkpoint.DIRECTORY / '12').mkdir(parents=True)
  return train


def test_the_first_runs_are_the_key_rows_at_seed_zero(tmp_path):
  planned = list(order.planned_runs(tmp_path, [30, 100]))
  assert planned[:5] == [
      ('simple_cnn', (), 30, 0), ('vit', (), 30, 0),
      ('vit', recipes.ALL[:-1], 30, 0), ('vit', recipes.ALL, 30, 0),
      ('vit', ('distillation',), 30, 0)]
  assert len(planned) == len(set(planned))
  # Last, after every seed, the ablation's other steps at the longer budget.
  other_steps = [('spt_lsa',), ('spt_lsa', 'distillation'),
                 *recipes.CUMULATIVE[1:-2]]
  assert planned[-6:] == [('vit', i, 100, 0) for i in other_steps]
  assert all(seed == 0 for *_, seed in planned[-6:])
  # Before them, round three's levers on the best recipe and round two's
  # rows after locality guidance's, just after the seeds (an empty workdir
  # ranks none of them best).
  rest = _round_three(100) + _round_two_after_the_seeds(100)
  assert planned[-6 - len(rest):-6] == rest
  assert max(i for i, (*_, seed) in enumerate(planned) if seed) == (
      len(planned) - 6 - len(rest) - 1)


def test_seeds_go_to_the_rows_the_seed_zero_runs_rank_best(tmp_path,
                                                          monkeypatch):
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({
      ('small_resnet', 'study'): 0.69, ('simple_cnn', 'study'): 0.67,
      ('vit', 'study+spt_lsa'): 0.53, ('vit', 'study'): 0.51}, trained))
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=0)
  seeded = [name for name, overrides in trained if overrides['seed']]
  # Ranked as the seed-0 runs came out of training, not before it; the
  # rows of the share of the gap before the full recipe, which distils, so
  # the teacher's seeds train first.
  rows = ['simple_cnn_study', 'vit_study', 'vit_study+spt_lsa',
          'small_resnet_study', 'vit_' + recipes.recipe_name(recipes.ALL)]
  assert seeded == [f'{row}_e30_seed{seed}' for seed in (1, 2)
                    for row in rows]


def test_round_two_trains_around_the_seeds_and_can_carry_the_conclusion(
    tmp_path, monkeypatch):
  planned = list(order.planned_runs(tmp_path, [30, 100]))
  for epochs in (30, 100):
    at_budget = [p for p in planned if p[2] == epochs]
    first_seed = next(i for i, (*_, seed) in enumerate(at_budget) if seed)
    first = [('vit', ingredients, epochs, 0)
             for ingredients in recipes.ROUND_TWO_FIRST]
    assert at_budget[first_seed - len(first):first_seed] == first
    # Round three's levers on each budget's best recipe first.
    rest = _round_three(epochs) + _round_two_after_the_seeds(epochs)
    seed_zero = [p for p in planned[planned.index(at_budget[first_seed]):]
                 if not p[3]]
    assert seed_zero[:len(rest)] == rest
  # The short budget's seeds before the long budget's round two.
  assert max(i for i, p in enumerate(planned) if p[2:] == (30, 2)) < min(
      i for i, p in enumerate(planned) if p[2] == 100 and p[1] in
      recipes.ROUND_TWO)
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({
      ('vit', 'study+distillation+mimetic'): 0.6}, trained))
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=0)
  seeded = [name for name, overrides in trained if overrides['seed']]
  assert 'vit_study+distillation+mimetic_e30_seed1' in seeded
  assert dict(trained)['vit_study+mimetic_e30_seed0'][
      'model_overrides.mimetic_init'] is True
  guided = dict(trained)['vit_study+distillation+locality_guidance_e30_seed0']
  assert guided['locality_guidance_teacher'] == guided[
      'distillation_teacher'] == tmp_path / 'simple_cnn_study_e30_seed0'


def _round_two_after_the_seeds(epochs):
  """Round two's rows after locality guidance's, at seed 0, each MAE row
  just after the pre-training it reads, the first time one does: at 100
  epochs, round three's longer pre-training at 30 read it first."""
  rest = [('vit', ingredients, epochs, 0) for ingredients in recipes.ROUND_TWO
          if ingredients not in recipes.ROUND_TWO_FIRST]
  if epochs != recipes.SOURCE_EPOCHS['long_mae'][30]:
    pretraining = ('vit', (recipes.PRETRAINING,), epochs, 0)
    rest.insert(rest.index(('vit', ('mae',), epochs, 0)), pretraining)
  return rest


def _round_two_late(epochs):
  """The names of round two's rows that train after a long budget's
  three-seed rows, at seed 0."""
  return [recipes.run_name('vit', ingredients, epochs, 0)
          for ingredients in recipes.ROUND_TWO_LATE]


def _round_three(epochs):
  """Round three's rows at seed 0 at a budget of [30, 100]: at each the
  CNNs with the ViT's best augmentation first, and the longer MAE
  pre-training just before the row that reads it."""
  cnns = [(model, ('trivial_augment',), epochs, 0)
          for model in ('simple_cnn', 'small_resnet')]
  if epochs == 100:
    *rows, longer = [('vit', ingredients, 100, 0)
                     for ingredients in recipes.ROUND_THREE]
    return cnns + [*rows, ('vit', (recipes.PRETRAINING,), 300, 0), longer]
  return cnns + [('vit', (recipes.PRETRAINING,), 100, 0)] + [
      ('vit', ingredients, 30, 0)
      for ingredients in recipes.ROUND_THREE_FIRST_BUDGET]


def test_locality_guidance_ranked_best_takes_its_seeds_before_the_other_levers(
    tmp_path, monkeypatch):
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({
      ('vit', 'study+locality_guidance'): 0.6}, trained))
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=0)
  names = [name for name, _ in trained]
  first_seed = next(i for i, (_, overrides) in enumerate(trained)
                    if overrides['seed'])
  other_levers = names.index(  # round three's first row ([30]: the last budget)
      f'simple_cnn_{recipes.recipe_name(recipes.CNN_ROUND_THREE[0])}_e30_seed0')
  # Ranked after locality guidance's runs trained, not before.
  assert names.index('vit_study+locality_guidance_e30_seed2') < other_levers
  seeded = trained[first_seed:other_levers]
  assert all(overrides['seed'] for _, overrides in seeded)
  rows = {seed: [name.rsplit('_seed', 1)[0] for name, overrides in seeded
                 if overrides['seed'] == seed] for seed in (1, 2)}
  assert rows[1] == rows[2]
  assert 'vit_study+locality_guidance_e30' in rows[1]


def test_a_cnn_with_the_vits_best_augmentation_can_be_the_best_cnn(
    tmp_path, monkeypatch):
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({
      ('small_resnet', 'study+trivial_augment'): 0.75,
      ('small_resnet', 'study'): 0.73,
      ('vit', 'study+distillation+locality_guidance+trivial_augment'): 0.71},
      trained))
  run.train(tmp_path, tmp_path / 'data', [100], max_runs=0)
  names = [name for name, _ in trained]
  cnn = 'small_resnet_study+trivial_augment_e100_seed0'
  assert dict(trained)[cnn].items() >= recipes.changes(
      'trivial_augment', epochs=100).items()
  # Ranked best at seed 0, it takes the seeds the ViT is held against,
  # before the ViT's levers.
  assert names.index(cnn) < names.index(
      'small_resnet_study+trivial_augment_e100_seed2') < names.index(
          f'vit_{recipes.recipe_name(recipes.ROUND_THREE[0])}_e100_seed0')
  assert ('small_resnet', ('trivial_augment',)) in order.conclusion_rows(
      recipes.load_runs(tmp_path), 100)


def test_the_resnet_teacher_lever_learns_from_the_augmented_smallresnet(
    tmp_path, monkeypatch):
  trained = []
  levers = recipes.BEST + ('trivial_augment', 'resnet_teacher')
  monkeypatch.setattr(run.runs, 'train', _fake_training({
      ('vit', recipes.recipe_name(levers)): 0.8}, trained))
  run.train(tmp_path, tmp_path / 'data', [100], max_runs=0)
  names = [name for name, _ in trained]
  teacher = tmp_path / 'small_resnet_study+trivial_augment_e100_seed0'
  student = dict(trained)[recipes.run_name('vit', levers, 100, 0)]
  assert student['distillation_teacher'] == teacher
  assert student['locality_guidance_teacher'] == teacher
  assert student['model_overrides.guidance_widths'] == (
      models.SmallResNet().feature_widths)
  # In either order of the ingredients.
  assert recipes.recipe_overrides(
      'vit', ('resnet_teacher',) + recipes.BEST, 100)[
          'model_overrides.guidance_widths'] == (
              models.SmallResNet().feature_widths)
  # Ranked best, its seeds each learn from the SmallResNet of their seed,
  # trained before them.
  for seed in (1, 2):
    reader = recipes.run_name('vit', levers, 100, seed)
    source = f'small_resnet_study+trivial_augment_e100_seed{seed}'
    assert names.index(source) < names.index(reader)
    assert dict(trained)[reader]['distillation_teacher'] == tmp_path / source


def test_the_mae_under_the_best_row_reads_its_pretraining_and_the_resnet(
    tmp_path, monkeypatch):
  trained = []
  levers = recipes.BEST + ('trivial_augment', 'resnet_teacher', 'mae')
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, trained))
  run.train(tmp_path, tmp_path / 'data', [100], max_runs=0)
  student = dict(trained)[recipes.run_name('vit', levers, 100, 0)]
  assert student['init_from'] == (
      tmp_path / 'vit_study+mae_pretraining_e100_seed0')
  assert student['distillation_teacher'] == student[
      'locality_guidance_teacher'] == (
          tmp_path / 'small_resnet_study+trivial_augment_e100_seed0')
  assert student['model_overrides.distillation_token'] is True


def test_long_first_trains_the_long_budgets_rows_before_the_rest(
    tmp_path, monkeypatch):
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({
      ('vit', 'study+distillation'): 0.6, ('vit', 'study'): 0.52,
      ('small_resnet', 'study'): 0.7}, trained))
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=10)
  records = recipes.load_runs(tmp_path)
  rows = order.long_rows(records, 30)
  assert ('vit', ('distillation',)) in rows
  trained.clear()
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=0,
            long_budgets=(300, 1000), long_first=True)
  names = [name for name, _ in trained]
  # At the longest budget seed 0 alone: whether more seeds train is
  # decided at the end, without holding up the runs after these.
  first = [recipes.run_name(model, ingredients, 300, seed)
           for seed in (0, 1, 2) for model, ingredients in rows] + [
               recipes.run_name(model, ingredients, 1000, 0) for
               model, ingredients in order.long_rows(records, 30, True)]
  assert names[:len(first)] == first
  assert f'vit_{recipes.recipe_name(recipes.ALL)}_e30_seed1' in names
  assert len(names) == len(set(names))


def test_an_mae_row_fine_tunes_from_its_pretraining_which_ranks_nowhere(
    tmp_path, monkeypatch):
  trained = []
  # The pre-training's probe scores best: it still carries no conclusion.
  monkeypatch.setattr(run.runs, 'train', _fake_training({
      ('vit', 'study+mae_pretraining'): 0.9,
      ('vit', 'study+mae'): 0.6, ('small_resnet', 'study'): 0.7}, trained))
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=0)
  names = [name for name, _ in trained]
  pretraining = 'vit_study+mae_pretraining_e30_seed0'
  # Just before its first reader (here round three's, at this last budget).
  first_reader = names[names.index(pretraining) + 1]
  assert dict(trained)[first_reader]['init_from'] == tmp_path / pretraining
  assert names.index(pretraining) < names.index('vit_study+mae_e30_seed0')
  assert names.count(pretraining) == 1
  assert dict(trained)[pretraining]['model_overrides.mae_mask_ratio'] == 0.75
  tuned = dict(trained)['vit_study+mae_e30_seed0']
  guided = dict(trained)['vit_study+locality_guidance+mae_e30_seed0']
  assert tuned['init_from'] == guided['init_from'] == tmp_path / pretraining
  assert 'model_overrides.mae_mask_ratio' not in tuned
  assert guided['locality_guidance_teacher'] == (
      tmp_path / 'simple_cnn_study_e30_seed0')
  # The fine-tuned row is the best and takes the seeds, each from its own
  # pre-training.
  assert 'vit_study+mae_e30_seed2' in names
  assert dict(trained)['vit_study+mae_e30_seed2']['init_from'] == (
      tmp_path / 'vit_study+mae_pretraining_e30_seed2')
  assert not any('mae_pretraining' in recipe for _, recipe in
                 order.conclusion_rows(recipes.load_runs(tmp_path), 30))
  rows = [line for line in run.table(recipes.load_runs(tmp_path)).splitlines()
          if 'mae_pretraining' in line]
  assert rows and all('an online probe' in row and '%' not in row
                      for row in rows)


def test_locality_guidance_imitates_the_teachers_stages():
  student = models.from_config(
      _recipe_config('vit', ('locality_guidance',)), 10)
  teacher = models.from_config(data_efficient.get_config(recipes.TEACHER), 10)
  assert student.guidance_widths == teacher.feature_widths
  assert student.guided_blocks == (0, student.num_layers // 2,
                                   student.num_layers - 1)


def test_the_long_budget_trains_the_two_best_vits_and_each_cnns_best(
    tmp_path, monkeypatch):
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({
      ('vit', 'study+distillation+locality_guidance'): 0.6,
      ('vit', 'study+locality_guidance'): 0.58, ('vit', 'study'): 0.52,
      ('simple_cnn', 'study'): 0.67, ('small_resnet', 'study'): 0.66,
      ('small_resnet', 'study+trivial_augment+random_erasing+mixup_cutmix'):
          0.69}, trained))
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=0,
            long_budgets=(300,))
  long = [name for name, overrides in trained
          if overrides['num_epochs'] == 300]
  # The study recipe's three seeds (52%) rank before guidance's one (58%).
  rows = ['simple_cnn_study', 'vit_study+distillation+locality_guidance',
          'vit_study',
          'small_resnet_study+trivial_augment+random_erasing+mixup_cutmix']
  assert long == [f'{row}_e300_seed{seed}' for seed in (0, 1, 2)
                  for row in rows]
  assert dict(trained)['vit_study+distillation+locality_guidance_e300_seed1'][
      'distillation_teacher'] == tmp_path / 'simple_cnn_study_e300_seed1'
  # After every run of the comparison budget but round two's weakest rows,
  # which cannot carry the answer there.
  names = [name for name, _ in trained]
  late = _round_two_late(30)
  assert names[-len(long) - len(late):] == long + late


@pytest.mark.parametrize('vit, teacher, seeds', [
    (0.68, 0.67, [0, 1, 2]),  # within 4 points of the best CNN's seed 0
    (0.6, 0.67, [0]),  # far at 1,000 epochs, close at 30
    (0.68, 0.75, [0]),  # the teacher is the best CNN at 1,000 epochs
])
def test_the_longest_budget_trains_the_best_vit_and_cnn_and_seeds_if_close(
    tmp_path, monkeypatch, vit, teacher, seeds):
  trained = []
  fake = _fake_training({
      ('vit', 'study+distillation+locality_guidance'): 0.69,
      ('vit', 'study+distillation+locality_guidance', 1000): vit,
      ('simple_cnn', 'study'): 0.67, ('simple_cnn', 'study', 1000): teacher,
      ('small_resnet', 'study'): 0.7}, trained)

  def slow_at_the_longest(directory, config, overrides, description):
    if overrides['num_epochs'] == 1000:
      time.sleep(0.2)
    fake(directory, config, overrides, description)

  monkeypatch.setattr(run.runs, 'train', slow_at_the_longest)
  # Side by side: the choice of seeds waits for seed 0's runs.
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=0,
            long_budgets=(300, 1000), side_by_side=3)
  longest = [name for name, overrides in trained
             if overrides['num_epochs'] == 1000]
  # The teacher the ViT reads, the ViT, the best CNN; seeds 1 and 2 only
  # where the ViT's seed 0 came within reach of the best CNN's there.
  assert sorted(longest) == sorted(
      f'{row}_e1000_seed{seed}' for seed in seeds for row in (
          'simple_cnn_study', 'vit_study+distillation+locality_guidance',
          'small_resnet_study'))
  # The budgets before it train all their rows' seeds, and round two's
  # weakest rows train between them.
  names = [name for name, _ in trained]
  rest = _round_two_late(30)
  assert max(i for i, name in enumerate(names) if '_e300_' in name) < min(
      map(names.index, rest))
  assert max(map(names.index, rest)) < min(map(names.index, longest))
  assert order.long_rows(recipes.load_runs(tmp_path), 30, longest=True) == [
      ('simple_cnn', ()), ('vit', ('distillation', 'locality_guidance')),
      ('small_resnet', ())]


def test_a_longer_pretraining_ranked_best_reads_the_next_budgets_at_long_ones(
    tmp_path, monkeypatch):
  """The best ViT fine-tunes the next budget's pre-training: at 300 epochs
  the 1,000-epoch one; at 1,000, where none is longer, its own, as `mae`."""
  longer = recipes.BEST + ('trivial_augment', 'resnet_teacher', 'long_mae')
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({
      ('vit', recipes.recipe_name(longer)): 0.9}, trained))
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=0,
            long_budgets=(300, 1000))
  overrides = dict(trained)
  pretraining = tmp_path / 'vit_study+mae_pretraining_e1000_seed0'
  name = f'vit_{recipes.recipe_name(longer)}'
  assert overrides[f'{name}_e300_seed0']['init_from'] == pretraining
  assert f'{name}_e1000_seed0' not in overrides
  mae = name.replace('long_mae', 'mae')
  assert overrides[f'{mae}_e1000_seed0']['init_from'] == pretraining


def test_a_runs_sources_train_beside_each_other(tmp_path, monkeypatch):
  """Side by side, a run's pre-training starts while the teacher it also
  reads, yielded before it, is still training; the run waits for both."""
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, []))
  run.train(tmp_path / 'elsewhere', tmp_path / 'data', [30], max_runs=0)
  landed = {recipes.record_name(r): r
            for r in recipes.load_runs(tmp_path / 'elsewhere')}
  teacher, pretraining, reader = ('simple_cnn_study_e30_seed0',
                                  'vit_study+mae_pretraining_e30_seed0',
                                  'vit_study+locality_guidance+mae_e30_seed0')
  for name in (teacher, pretraining, reader):
    del landed[name]
  events = []

  def wait_for(source):
    events.append(('waited for', source.name))

  for directory, *_ in order.unfinished_runs(
      tmp_path / 'fresh', [30], landed, (), wait_for):
    events.append(('started', directory.name))
    finished_run(directory)
  assert events.index(('started', pretraining)) < events.index(
      ('waited for', teacher)) < events.index(('started', reader))
  assert events.index(('waited for', pretraining)) < events.index(
      ('started', reader))


def test_every_long_budget_but_the_longest_trains_three_seeds(
    tmp_path, monkeypatch):
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({
      ('vit', 'study+distillation+locality_guidance'): 0.6,
      ('small_resnet', 'study'): 0.7}, trained))
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=0,
            long_budgets=(300, 500, 1000))
  names = [name for name, _ in trained]
  seeds = {epochs: {overrides['seed'] for _, overrides in trained
                    if overrides['num_epochs'] == epochs}
           for epochs in (300, 500, 1000)}
  assert seeds == {300: {0, 1, 2}, 500: {0, 1, 2}, 1000: {0}}
  # The shorter long budgets, then round two's weakest rows, then the
  # longest.
  at = {epochs: [i for i, name in enumerate(names) if f'_e{epochs}_' in name]
        for epochs in (300, 500, 1000)}
  late = list(map(names.index, _round_two_late(30)))
  assert max(at[300]) < min(at[500])
  assert max(at[500]) < min(late)
  assert max(late) < min(at[1000])


def test_no_long_budget_rows_before_the_comparison_runs(tmp_path):
  assert order.long_rows([], 100) == []


def test_max_runs_counts_only_new_runs(tmp_path, monkeypatch):
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, trained))
  finished_run(tmp_path / 'simple_cnn_study_e30_seed0', seed=0)
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=2)
  assert [name for name, _ in trained] == [
      'vit_study_e30_seed0',
      f'vit_{recipes.recipe_name(recipes.ALL[:-1])}_e30_seed0']


def test_a_distilled_run_is_taught_by_the_teacher_of_its_budget_and_seed(
    tmp_path, monkeypatch):
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, trained))
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=5)
  name, overrides = trained[-1]
  assert name == 'vit_study+distillation_e30_seed0'
  assert overrides['model_overrides.distillation_token']
  assert overrides['distillation_teacher'] == (
      tmp_path / 'simple_cnn_study_e30_seed0')
  assert 'distillation_teacher' not in trained[1][1]


def test_a_distilled_run_without_its_teacher_is_one_clear_error(
    tmp_path, monkeypatch):
  # A teacher run that fails leaves no summary.
  monkeypatch.setattr(run.runs, 'train', lambda *args: None)
  with pytest.raises(SystemExit, match='error: .*simple_cnn_study_e30_seed0, '
                     'which vit_.*_e30_seed0 reads, has not finished'):
    run.train(tmp_path, tmp_path / 'data', [30], max_runs=0)


def test_load_runs_reads_model_recipe_and_seed(tmp_path):
  finished_run(tmp_path / 'a', seed=2, model='small_resnet', epochs=100.0,
               description={'recipe': 'study', 'train_examples': 5000})
  finished_run(tmp_path / 'b', seed=0, description={
      'recipe': 'study+spt_lsa+distillation', 'train_examples': 5000})
  (tmp_path / 'vit_study_e30_seed1').mkdir()  # interrupted: no summary
  records = recipes.load_runs(tmp_path)
  assert [(r['model'], r['recipe'], r['epochs'], r['seed'],
           r['train_examples']) for r in records] == [
               ('vit', 'study+spt_lsa+distillation', 30, 0, 5000),
               ('small_resnet', 'study', 100, 2, 5000)]


def test_the_committed_records_name_planned_runs():
  landed = run.runs.landed(run.HERE / 'results.json', recipes.record_name)
  # The long budgets the records have (300 here, 1,000 on a GPU).
  long_budgets = tuple(sorted({r['epochs'] for r in landed.values()}
                              - {30, 100}))
  planned = {recipes.run_name(*r) for r in order.planned_runs(
      run.HERE / 'no workdir', [30, 100], landed, long_budgets)}
  assert landed and set(landed) <= planned


def test_a_fresh_workdir_trains_only_what_the_committed_records_lack(
    tmp_path, monkeypatch):
  # Every run of the first budget landed from another machine's workdir;
  # this one is empty.
  everything = tmp_path / 'elsewhere'
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, []))
  run.train(everything, tmp_path / 'data', [30], max_runs=0)
  landed = {recipes.record_name(r): r for r in recipes.load_runs(everything)}
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, trained))
  run.train(tmp_path / 'fresh', tmp_path / 'data', [30], max_runs=0,
            landed=landed)
  assert not trained
  # A distilled run that is missing needs its teacher's checkpoint: the
  # teacher trains again first, and its record becomes the new run's.
  student = f'vit_{recipes.recipe_name(recipes.ALL)}_e30_seed2'
  del landed[student]
  landed['simple_cnn_study_e30_seed2']['wall_minutes'] = 99.0
  run.train(tmp_path / 'fresh', tmp_path / 'data', [30], max_runs=0,
            landed=landed)
  assert [name for name, _ in trained] == ['simple_cnn_study_e30_seed2',
                                           student]
  records = recipes.load_runs(tmp_path / 'fresh', landed)
  assert len(records) == len(landed) + 1
  teacher, = [r for r in records if (r['model'], r['seed']) == (
      'simple_cnn', 2)]
  assert teacher['wall_minutes'] == 16.5  # the retrained run's


def test_hours_trains_only_the_runs_that_end_in_time_with_what_they_read(
    tmp_path, monkeypatch, capsys):
  """A fresh machine with the committed records of every 30-epoch run but
  three (16.5 min each, at 0.55 min per epoch): a row alone fits 25
  minutes; a distilled
  row, whose teacher is gone with the other workdir, and an MAE row,
  whose pre-training never ran, do not, and neither does what they read.
  An hour is enough for them."""
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, []))
  run.train(tmp_path / 'elsewhere', tmp_path / 'data', [30], max_runs=0)
  landed = {recipes.record_name(r): {**r, 'wall_minutes': 0.55 * r['epochs']}
            for r in recipes.load_runs(tmp_path / 'elsewhere')}
  alone = 'vit_study_e30_seed1'
  student = f'vit_{recipes.recipe_name(recipes.ALL)}_e30_seed2'
  tuned, pretraining = ('vit_study+mae_e30_seed0',
                        'vit_study+mae_pretraining_e30_seed0')
  for name in (alone, student, tuned, pretraining):
    del landed[name]
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, trained))
  run.train(tmp_path / 'fresh', tmp_path / 'data', [30], max_runs=0,
            landed=landed, hours=25 / 60)
  assert [name for name, _ in trained] == [alone]
  printed = capsys.readouterr().out
  for name in (student, tuned):
    assert (f'passing over {name}: about 33 min with the runs it reads, '
            'more than the 25 min left of --hours') in printed
  run.train(tmp_path / 'fresh', tmp_path / 'data', [30], max_runs=0,
            landed=landed, hours=1)
  names = [name for name, _ in trained]
  assert names[1:] == ['simple_cnn_study_e30_seed2', student,
                       pretraining, tuned]
  nothing_run = run.ends_in_time(tmp_path / 'empty', {}, time.monotonic())
  assert 'no CPU run of its model has run yet' in nothing_run(
      [('vit', (), 30)])


def test_hours_estimates_at_the_pace_of_the_runs_finished_here(
    tmp_path, monkeypatch):
  """A machine at half the pace of the one the records came from: once a
  run has taken twice its record's minutes here, so does every estimate."""
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, []))
  run.train(tmp_path / 'elsewhere', tmp_path / 'data', [30], max_runs=2)
  landed = {recipes.record_name(r): {**r, 'wall_minutes': 8.25}
            for r in recipes.load_runs(tmp_path / 'elsewhere')}
  # Another seed of the run to be retrained here: a rate that stays once
  # the retrained run's record replaces its own.
  teacher = landed['simple_cnn_study_e30_seed0']
  landed['simple_cnn_study_e30_seed1'] = {**teacher, 'seed': 1}
  too_long = run.ends_in_time(tmp_path / 'here', landed,
                              time.monotonic() + 12 * 60)
  assert too_long([('vit', (), 30)]) is None
  run.train(tmp_path / 'here', tmp_path / 'data', [30], max_runs=1)
  slower = ("about 16 min at this machine's pace, 2.0 times the records' "
            'minutes, more than the 12 min left of --hours')
  assert too_long([('vit', (), 30)]) == slower
  # Restarted after its records replaced those in results.json: the same.
  landed.update({recipes.record_name(r): r
                 for r in recipes.load_runs(tmp_path / 'here')})
  assert run.ends_in_time(tmp_path / 'here', landed, time.monotonic() +
                          12 * 60)([('vit', (), 30)]) == slower


def test_hours_asks_again_after_each_run_a_run_reads(tmp_path, monkeypatch,
                                                     capsys):
  """A student and its teacher, gone with the other workdir, fit 30 minutes
  at the records' pace; the teacher takes twice its record's minutes
  here, and the student, at that pace, no longer fits."""
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, []))
  run.train(tmp_path / 'elsewhere', tmp_path / 'data', [30], max_runs=0)
  landed = {recipes.record_name(r): {**r, 'wall_minutes': 0.55 * r['epochs']}
            for r in recipes.load_runs(tmp_path / 'elsewhere')}
  for record in landed.values():
    if record['model'] == 'simple_cnn':
      record['wall_minutes'] /= 2
  student = f'vit_{recipes.recipe_name(recipes.ALL)}_e30_seed2'
  del landed[student]
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, trained))
  run.train(tmp_path / 'fresh', tmp_path / 'data', [30], max_runs=0,
            landed=landed, hours=0.5)
  assert [name for name, _ in trained] == ['simple_cnn_study_e30_seed2']
  assert (f'passing over {student}: about 33 min at this machine\'s pace, '
          "2.0 times the records' minutes, more than the 30 min left of "
          '--hours') in capsys.readouterr().out


def test_hours_with_runs_side_by_side_is_one_clear_error():
  # Its estimates are a lone run's on this CPU.
  result = subprocess.run(
      [sys.executable, '-m', 'experiments.data_efficiency.run', '--hours=1',
       '--side_by_side=2'], cwd=ROOT, capture_output=True, text=True,
      timeout=300, check=False)
  assert result.returncode == 1
  assert result.stderr.splitlines()[-1] == (
      'error: --hours estimates one run at a time, from lone runs on this '
      'CPU; pass --side_by_side=1 with it, or leave --hours out.')


def test_max_runs_counts_a_teacher_trained_again(tmp_path, monkeypatch):
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, []))
  run.train(tmp_path / 'elsewhere', tmp_path / 'data', [30], max_runs=0)
  landed = {recipes.record_name(r): r
            for r in recipes.load_runs(tmp_path / 'elsewhere')}
  student = f'vit_{recipes.recipe_name(recipes.ALL)}_e30_seed1'
  del landed[student]
  trained, summaries = [], []
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, trained))
  run.train(tmp_path / 'fresh', tmp_path / 'data', [30], max_runs=1,
            landed=landed, after_each_run=lambda: summaries.append(1))
  assert [name for name, _ in trained] == ['simple_cnn_study_e30_seed1']
  run.train(tmp_path / 'fresh', tmp_path / 'data', [30], max_runs=1,
            landed=landed, after_each_run=lambda: summaries.append(1))
  assert [name for name, _ in trained] == ['simple_cnn_study_e30_seed1',
                                           student]
  assert len(summaries) == 2  # results land as each run finishes


def _record(model, recipe, accuracy, seed=0):
  return {'model': model, 'recipe': recipe, 'epochs': 30, 'seed': seed,
          'best_test_accuracy': accuracy, 'final_train_accuracy': 0.5,
          'wall_minutes': 10.0, 'device': 'cpu'}


def test_the_table_gives_each_vit_row_its_share_of_the_gap():
  records = [
      _record('small_resnet', 'study', 0.71),
      _record('simple_cnn', 'study', 0.66),
      *(_record('vit', 'study', a, seed) for seed, a in
        enumerate([0.50, 0.51, 0.52])),
      *(_record('vit', 'study+distillation', a, seed) for seed, a in
        enumerate([0.52, 0.53, 0.54])),
      _record('vit', 'study+spt_lsa', 0.50)]
  rows = {line.split(' | ')[1]: line.split(' | ')
          for line in run.table(records).splitlines()
          if line.startswith('| ViT')}
  assert '(best CNN: SmallResNet, study, 71.0%)' in run.table(records)
  assert rows['study'][2:5] == ['51.0 ± 1.0 (n=3)', '50.0 ± 0.0 (n=3)', '0%']
  # (53 - 51) / (71 - 51) of the gap; the standard error of the difference
  # of two means of three seeds, each with a sample deviation of 1 point.
  assert rows['study+distillation'][4] == '10% (+2.0 ± 0.8)'
  assert rows['study+spt_lsa'][4] == '-5% (-1.0)'


def test_the_answer_across_budgets_compares_the_best_vit_with_the_best_cnn(
    tmp_path):
  def seeds(model, recipe, accuracies, epochs):
    return [{**_record(model, recipe, a, seed), 'epochs': epochs}
            for seed, a in enumerate(accuracies)]

  records = [
      *seeds('small_resnet', 'study', [0.68, 0.67, 0.69], 30),
      *seeds('simple_cnn', 'study', [0.66, 0.67, 0.68], 30),
      *seeds('vit', 'study', [0.50, 0.51, 0.52], 30),
      *seeds('vit', 'study+distillation', [0.60, 0.62, 0.64], 30),
      # One lucky seed does not displace a mean over three.
      *seeds('vit', 'study+distillation+ema', [0.65], 30),
      *seeds('small_resnet', 'study', [0.73, 0.74, 0.72], 300),
      *seeds('vit', 'study', [0.56], 300),
      *seeds('vit', 'study+distillation', [0.73, 0.74, 0.75], 300)]
  rows = budgets.best_rows(records)
  assert list(rows) == [30, 300]
  assert rows[30]['vit'][0] == 'study+distillation'
  assert rows[30]['study'][0] == 'study'
  assert rows[300]['small_resnet'][0] == 'study'
  lines = budgets.answer(records).splitlines()
  assert lines[0].startswith(
      "- 30 epochs: the ViT's best, `study+distillation`, 62.0 ± 2.0 (n=3), "
      'against SmallResNet `study`, 68.0 ± 1.0 (n=3): -6.0 points')
  # Its cost counts the teacher it learns from (no 300-epoch teacher ran).
  assert lines[0].endswith(
      'wall minutes per seed: 10 for the ViT, 10 for the SimpleCNN `study` '
      'it learns from (this 2-core CPU unless a GPU is named).')
  assert 'wall minutes per seed: 10 for the ViT (this' in lines[1]
  assert '+1.0 points' in lines[1]
  assert lines[-1] == ('A pure ViT matches the best CNN, over three seeds, '
                       'at 300 epochs.')
  budgets.plot(records, tmp_path / 'budgets.png')
  assert (tmp_path / 'budgets.png').stat().st_size > 0


@pytest.mark.parametrize('vit_recipes', [
    (), ('study',), ('study', 'study+distillation', 'study+spt_lsa')])
def test_the_figures_draw_whole_at_any_number_of_vit_rows(tmp_path,
                                                         vit_recipes):
  """Before the ViT's runs land, with one, with several: matplotlib fits
  every title, label and legend (it warns where a layout cannot)."""
  records = [_record('small_resnet', 'study', 0.71),
             _record('simple_cnn', 'study', 0.66),
             *(_record('vit', recipe, 0.5) for recipe in vit_recipes)]
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    run.plot(records, tmp_path / 'ablation.png')
    budgets.plot(records, tmp_path / 'budgets.png')
  assert (tmp_path / 'ablation.png').stat().st_size > 0
  assert (tmp_path / 'budgets.png').stat().st_size > 0


def test_labels_read_alone_when_the_previous_step_is_not_shown():
  full = recipes.recipe_name(recipes.ALL)
  without = recipes.recipe_name(recipes.ALL[:-1])
  assert recipes.label(full, ['study', without, full]) == '+ distillation'
  assert recipes.label(full, ['study', full]) == 'full recipe + distillation'
  assert recipes.label(without, ['study', without]) == (
      'full recipe without distillation')
  assert recipes.label('study+distillation', []) == 'study + distillation alone'
  assert recipes.label('study+mimetic', []) == 'study + mimetic alone'
  assert recipes.label('study+distillation+mimetic',
                       ['study+distillation']) == (
      'study + distillation + mimetic')


def test_a_former_best_keeps_its_seeds_when_another_row_overtakes_it():
  def record(recipe, seed, accuracy):
    return dict(model='vit', recipe=recipe, epochs=30, seed=seed,
                best_test_accuracy=accuracy)

  records = [record('study+distillation', seed, 0.53) for seed in range(3)]
  records.append(record('study+locality_guidance', 0, 0.61))
  rows = order.conclusion_rows(records, 30)
  assert rows.index(('vit', ('locality_guidance',))) < rows.index(
      ('vit', ('distillation',)))
  assert rows[0] == (recipes.TEACHER, ())


def test_a_teacher_read_at_its_best_that_kept_none_is_trained_again(
    tmp_path, monkeypatch):
  teacher = tmp_path / 'simple_cnn_study_e30_seed0'
  finished_run(teacher, seed=0, model='simple_cnn', epochs=30.0,
               description={'recipe': 'study', 'train_examples': 5000},
               best_test_accuracy=0.25)
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, trained))
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=0)
  names = [name for name, _ in trained]
  reader = f'vit_{recipes.recipe_name(recipes.BEST + ("best_teacher",))}'
  reader += '_e30_seed0'
  # Read at its last checkpoint until then; trained again just before the
  # row that reads its best, the first run set aside, not deleted.
  assert names.count(teacher.name) == 1
  assert names.index(teacher.name) + 1 == names.index(reader)
  assert dict(trained)[teacher.name]['keep_best_checkpoint'] is True
  aside = tmp_path / order.SET_ASIDE / teacher.name
  assert (aside / 'summary.json').exists()
  # Its record is the retrained run's, not the one set aside.
  teachers = [r for r in recipes.load_runs(tmp_path)
              if recipes.record_name(r) == teacher.name]
  assert [r['best_test_accuracy'] for r in teachers] == [0.5]
  assert dict(trained)[reader]['teacher_checkpoint'] == 'best'
  assert dict(trained)[reader]['distillation_teacher'] == teacher


def test_the_longer_mae_pretraining_is_the_100_epoch_rows(tmp_path,
                                                          monkeypatch):
  trained = []
  monkeypatch.setattr(run.runs, 'train', _fake_training({}, trained))
  run.train(tmp_path, tmp_path / 'data', [30, 100], max_runs=0)
  names = [name for name, _ in trained]
  pretraining = 'vit_study+mae_pretraining_e100_seed0'
  tuned = 'vit_study+locality_guidance+long_mae_e30_seed0'
  assert names.count(pretraining) == 1
  assert names.index(pretraining) + 1 == names.index(tuned)
  assert dict(trained)[tuned]['init_from'] == tmp_path / pretraining
  assert dict(trained)[tuned]['num_epochs'] == 30
  # The 100-epoch MAE rows read the same pre-training, and so does the
  # distilled row of the first budget, taught by its budget's teacher.
  assert dict(trained)['vit_study+mae_e100_seed0']['init_from'] == (
      tmp_path / pretraining)
  distilled = dict(trained)[
      'vit_study+distillation+locality_guidance+long_mae_e30_seed0']
  assert distilled['init_from'] == tmp_path / pretraining
  assert distilled['distillation_teacher'] == (
      tmp_path / 'simple_cnn_study_e30_seed0')
  assert distilled['model_overrides.distillation_token'] is True
  # The 100-epoch best row's levers at 30 epochs: the same pre-training,
  # both teachers the SmallResNet with TrivialAugment of the first budget.
  whole = dict(trained)['vit_study+distillation+locality_guidance+'
                        'trivial_augment+resnet_teacher+long_mae_e30_seed0']
  assert whole['init_from'] == tmp_path / pretraining
  assert whole['distillation_teacher'] == whole[
      'locality_guidance_teacher'] == (
          tmp_path / 'small_resnet_study+trivial_augment_e30_seed0')
  # At 100 epochs, the best row reads the 300-epoch pre-training, trained
  # just before it, and its own budget's teacher.
  longer = 'vit_study+mae_pretraining_e300_seed0'
  best = ('vit_study+distillation+locality_guidance+trivial_augment+'
          'resnet_teacher+long_mae_e100_seed0')
  assert names.index(longer) + 1 == names.index(best)
  assert dict(trained)[longer]['num_epochs'] == 300
  assert dict(trained)[best]['init_from'] == tmp_path / longer
  assert dict(trained)[best]['num_epochs'] == 100
  assert dict(trained)[best]['distillation_teacher'] == (
      tmp_path / 'small_resnet_study+trivial_augment_e100_seed0')
