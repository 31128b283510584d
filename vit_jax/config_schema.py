"""Every field a training config has: its default, its meaning, its checks.

Each file in `configs/` starts from `defaults()` and overrides what its
experiment changes, so every config accepts the same `--config.FIELD=...`
overrides, and the tools (`vit_jax.benchmark`, `benchmark_input`, `analyze`)
build their configs here too. `validate` checks a config before any data is
read or anything compiled; `step_plan` turns its epochs into steps once the
dataset size is known: the loop counts steps.
"""

import dataclasses
import difflib
import json
from typing import Any

from absl import logging
import ml_collections


from vit_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Field:
  default: Any
  doc: str
  choices: tuple[str, ...] | None = None
  # Whether changing the field changes what a run's checkpoints mean: a
  # workdir trained with another value is not resumed (`check_resumable`).
  fixed_for_run: bool = False


FIELDS: dict[str, Field] = {
    # The model.
    'model': Field('ViT-Tiny-CIFAR_4', 'A registered model name '
                   '(vit_jax.models.registry).', fixed_for_run=True),
    'model_overrides': Field({}, 'Model fields to change, e.g. '
                             "{'dropout_rate': 0.0}; a config file sets the "
                             'keys --config.model_overrides.KEY can change.',
                             fixed_for_run=True),
    'dtype': Field('float32', 'Computation dtype; parameters and optimizer '
                   'state stay float32.', ('float32', 'bfloat16'),
                   fixed_for_run=True),
    'init_from': Field('', 'Start from these parameters: a run directory or a '
                       'released .npz (fine-tuning); empty: from scratch.'),
    # The data.
    'dataset': Field('cifar10', 'cifar10, cifar100, image_folder or '
                     'tfds:NAME.', fixed_for_run=True),
    'data_dir': Field('', 'Where the dataset is. Unset: $VIT_JAX_DATA_DIR, '
                      'else ~/.cache/vit_jax, where CIFAR is downloaded the '
                      'first time.'),
    'train_split': Field('train', 'Training split (tfds datasets).',
                         fixed_for_run=True),
    'test_split': Field('test', 'Evaluation split (tfds datasets).'),
    'train_examples': Field(0, 'Keep the first N training examples; 0: all.',
                            fixed_for_run=True),
    'train_examples_per_file': Field(
        0, 'CIFAR: keep the first N images of each training file of the '
        'release (the study: 1000 of each of the 5, its 5,000); 0: all.',
        fixed_for_run=True),
    'test_examples': Field(0, 'Keep the first N test examples; 0: all.'),
    'image_size': Field(32, 'Side of the square model input, in pixels.',
                        fixed_for_run=True),
    'input_pipeline': Field(
        'on_device', "'on_device': the dataset copied to every device once, "
        "batches gathered and augmented in the step (small data); "
        "'streaming': batches read and cropped on the hosts (ImageNet).",
        ('on_device', 'streaming'), fixed_for_run=True),
    'input_workers': Field(-1, 'Streaming: grain worker processes loading '
                           'batches on each host, each with a copy of the '
                           'source; -1: one per core this process may use; 0: '
                           'threads of the training process.'),
    'augment': Field(True, 'Training augmentation: on device, 4-pixel-padded '
                     'random crop + flip; streaming, Inception crop + flip.',
                     fixed_for_run=True),
    'auto_augment': Field(
        'none', 'Photometric and geometric ops drawn per image on the '
        'device, after the crop and flip (vit_jax.data.auto_augment): '
        "'trivial_augment' (one op, random magnitude) or 'rand_augment' "
        '(rand_augment_ops ops at rand_augment_magnitude).',
        ('none', 'trivial_augment', 'rand_augment'), fixed_for_run=True),
    'rand_augment_ops': Field(2, 'RandAugment: ops per image.',
                              fixed_for_run=True),
    'rand_augment_magnitude': Field(9, 'RandAugment: magnitude, 0-10.',
                                    fixed_for_run=True),
    'random_erasing': Field(0.0, 'Probability that a training image has one '
                            'random rectangle erased (on the device).',
                            fixed_for_run=True),
    'mixup_alpha': Field(0.0, 'Mixup: images and labels mixed with the '
                         'batch reversed, by Beta(alpha, alpha); 0: off.',
                         fixed_for_run=True),
    'cutmix_alpha': Field(0.0, 'CutMix: a box of the reversed batch pasted, '
                          'labels mixed by its area; 0: off. With both '
                          'alphas set, each step picks one at random.',
                          fixed_for_run=True),
    'distillation_teacher': Field(
        '', "DeiT hard distillation: the workdir of a trained run (e.g. a "
        "CNN's) whose predictions teach the student's distillation token "
        '(needs model_overrides.distillation_token=True); empty: none.',
        fixed_for_run=True),
    'pixel_mean': Field((0.5, 0.5, 0.5), 'Per-channel mean subtracted from '
                        'pixels in [0, 1].', fixed_for_run=True),
    'pixel_std': Field((0.5, 0.5, 0.5), 'Per-channel std pixels are divided '
                       'by.', fixed_for_run=True),
    # How long, and how often.
    'total_steps': Field(0, 'Optimizer steps of the run; 0: num_epochs '
                         'epochs of the training split.', fixed_for_run=True),
    'num_epochs': Field(0, 'Length in epochs, used when total_steps is 0.',
                        fixed_for_run=True),
    'warmup_steps': Field(0, 'Linear warmup from 0, in steps; 0: '
                          'warmup_epochs epochs.', fixed_for_run=True),
    'warmup_epochs': Field(0, 'Warmup in epochs, used when warmup_steps is 0.',
                           fixed_for_run=True),
    'lr_decay': Field('cosine', 'Decay to 0 at the last step after warmup.',
                      ('cosine', 'linear'), fixed_for_run=True),
    'log_every_steps': Field(0, 'Train metrics logged every N steps (and at '
                             'the last); 0: once an epoch.'),
    'eval_every_steps': Field(0, 'Evaluated every N steps (and at the last); '
                              '0: once an epoch.'),
    'checkpoint_every_steps': Field(0, 'Checkpointed every N steps (and at the '
                                    'last, and on SIGTERM); 0: once an '
                                    'epoch.'),
    'keep_checkpoints': Field(2, 'Newest checkpoints kept in the workdir.'),
    # The optimizer.
    'batch_size': Field(128, 'Global batch size, over all devices and '
                        'processes.', fixed_for_run=True),
    'grad_accumulation_steps': Field(1, 'Micro-batches each batch is split '
                                     'into (the same step, less memory).',
                                     fixed_for_run=True),
    'eval_batch_size': Field(256, 'Global evaluation batch size.'),
    'optimizer': Field('adamw', 'adamw, or sgd with momentum.',
                       ('adamw', 'sgd'), fixed_for_run=True),
    'learning_rate': Field(1e-3, 'Peak learning rate.', fixed_for_run=True),
    'weight_decay': Field(0.0, 'Decoupled weight decay.', fixed_for_run=True),
    'adam_b1': Field(0.9, 'Adam beta1 (adamw).', fixed_for_run=True),
    'adam_b2': Field(0.999, 'Adam beta2 (adamw).', fixed_for_run=True),
    'momentum': Field(0.9, 'Momentum (sgd).', fixed_for_run=True),
    'grad_clip_norm': Field(0.0, 'Clip gradients to this global norm; 0: '
                            'no clipping.', fixed_for_run=True),
    'label_smoothing': Field(0.0, 'Label smoothing of the cross-entropy.',
                             fixed_for_run=True),
    'seed': Field(0, 'Seeds initialisation, shuffling, augmentation and '
                  'dropout.', fixed_for_run=True),
    # The machine.
    'fsdp': Field(1, 'Devices each large parameter and optimizer-state array '
                  'is split over (fully sharded data parallel: the mesh\'s '
                  'fsdp axis); 1: every device holds all of them; -1: split '
                  'over all devices. The batch is split over every device '
                  'either way; a checkpoint restores onto any value.'),
    'cpu_devices': Field(4, 'Host devices the batch is split over on a CPU '
                         '(--cpu_devices overrides).'),
    'cpu_compiler_options': Field({}, 'XLA options the steps compile with on '
                                  'a CPU, e.g. '
                                  "{'xla_cpu_experimental_ynn_fusion_type': "
                                  "''}."),
}

_POSITIVE = ('batch_size', 'eval_batch_size', 'image_size', 'learning_rate',
             'keep_checkpoints', 'grad_accumulation_steps')
_NON_NEGATIVE = ('total_steps', 'num_epochs', 'warmup_steps', 'warmup_epochs',
                 'log_every_steps', 'eval_every_steps',
                 'checkpoint_every_steps', 'train_examples',
                 'train_examples_per_file', 'test_examples',
                 'weight_decay', 'grad_clip_norm',
                 'cpu_devices')


def defaults() -> ml_collections.ConfigDict:
  """A config holding every field at its default."""
  config = ml_collections.ConfigDict()
  for name, field in FIELDS.items():
    config[name] = (ml_collections.ConfigDict(field.default)
                    if isinstance(field.default, dict) else field.default)
  return config


def _unknown_field_message(name: str) -> str:
  close = difflib.get_close_matches(name, FIELDS, n=1)
  hint = f' (did you mean {close[0]!r}?)' if close else ''
  return (f'config.{name} is not a field of the config schema{hint}; the '
          'fields are listed in vit_jax/config_schema.py.')


def validate(config: ml_collections.ConfigDict, num_devices: int):
  """Raises ConfigError for a config that cannot run on `num_devices`.

  Reads no data and compiles nothing; what only the data or the model can
  tell (the dataset, the patch size) is checked where they are made.
  """
  for name in config.keys():
    if name not in FIELDS:
      raise ConfigError(_unknown_field_message(name))
  missing = [name for name in FIELDS if name not in config]
  if missing:
    raise ConfigError(f'The config lacks {", ".join(missing)}: start it from '
                      'vit_jax.config_schema.defaults().')
  for name, field in FIELDS.items():
    if field.choices and config[name] not in field.choices:
      raise ConfigError(f'config.{name}={config[name]!r}; use one of '
                        f'{field.choices}.')
  for name in _POSITIVE:
    if not config[name] > 0:
      raise ConfigError(f'config.{name}={config[name]} must be positive.')
  for name in _NON_NEGATIVE:
    if config[name] < 0:
      raise ConfigError(f'config.{name}={config[name]} must be >= 0.')
  if config.input_workers < -1:
    raise ConfigError(f'config.input_workers={config.input_workers}: use -1 '
                      '(one per CPU core), 0 (threads) or a count.')
  if not config.total_steps and not config.num_epochs:
    raise ConfigError('Set config.total_steps or config.num_epochs: the run '
                      'has no length.')
  for name in ('mixup_alpha', 'cutmix_alpha', 'rand_augment_ops'):
    if config[name] < 0:
      raise ConfigError(f'config.{name}={config[name]} must be >= 0.')
  if not 0 <= config.random_erasing <= 1:
    raise ConfigError(f'config.random_erasing={config.random_erasing} is a '
                      'probability: use a value in [0, 1].')
  if not 0 <= config.rand_augment_magnitude <= 10:
    raise ConfigError(f'config.rand_augment_magnitude='
                      f'{config.rand_augment_magnitude}: use 0 to 10.')
  has_token = bool(config.model_overrides.get('distillation_token', False))
  if config.distillation_teacher and not has_token:
    raise ConfigError(
        f'config.distillation_teacher={config.distillation_teacher} needs a '
        'student with a distillation token: add '
        '--config.model_overrides.distillation_token=True (a ViT).')
  if has_token and not config.distillation_teacher:
    raise ConfigError(
        'config.model_overrides.distillation_token=True needs a teacher: set '
        '--config.distillation_teacher to the workdir of a trained run.')
  if not 0 <= config.label_smoothing < 1:
    raise ConfigError(f'config.label_smoothing={config.label_smoothing} must '
                      'be in [0, 1).')
  if config.fsdp != -1 and (config.fsdp < 1 or num_devices % config.fsdp):
    raise ConfigError(
        f'config.fsdp={config.fsdp} does not divide the {num_devices} '
        f'devices; use a divisor of {num_devices}, or -1 for all of them.')
  for name in ('batch_size', 'eval_batch_size'):
    if config[name] % num_devices:
      raise ConfigError(
          f'config.{name}={config[name]} is not divisible by the '
          f'{num_devices} devices; use a multiple of {num_devices} (on a CPU, '
          'config.cpu_devices sets the number of devices).')
  accumulation = config.grad_accumulation_steps
  if config.batch_size % (accumulation * num_devices):
    raise ConfigError(
        f'config.grad_accumulation_steps={accumulation} must split '
        f'config.batch_size={config.batch_size} into micro-batches divisible '
        f'by the {num_devices} devices.')


@dataclasses.dataclass(frozen=True)
class StepPlan:
  """The run in steps: its length, warmup, and how often it logs,
  evaluates and checkpoints (each also happens at the last step)."""
  steps_per_epoch: int
  total_steps: int
  warmup_steps: int
  log_every: int
  eval_every: int
  checkpoint_every: int

  def epoch(self, step: int) -> float:
    return round(step / self.steps_per_epoch, 4)


def step_plan(config, steps_per_epoch: int) -> StepPlan:
  """Epoch-counted fields converted to steps, once, for a training split of
  `steps_per_epoch` batches (at least one: `data.create_input` refuses a
  batch larger than the split)."""
  total = config.total_steps or config.num_epochs * steps_per_epoch
  if config.total_steps and config.num_epochs:
    logging.info('config.total_steps=%d sets the length; config.num_epochs=%d '
                 'is not used.', config.total_steps, config.num_epochs)
  warmup = config.warmup_steps or config.warmup_epochs * steps_per_epoch
  if warmup >= total:
    logging.warning('The warmup (%d steps) is not shorter than the run (%d '
                    'steps): the run only warms up.', warmup, total)
    warmup = total
  return StepPlan(
      steps_per_epoch=steps_per_epoch, total_steps=total, warmup_steps=warmup,
      log_every=config.log_every_steps or steps_per_epoch,
      eval_every=config.eval_every_steps or steps_per_epoch,
      checkpoint_every=config.checkpoint_every_steps or steps_per_epoch)


# Epoch-counted fields and the step-counted fields that take their place
# when set (`step_plan`).
_SET_IN_STEPS_BY = {'num_epochs': 'total_steps',
                    'warmup_epochs': 'warmup_steps'}


def comparable(value) -> Any:
  """`value` as its JSON round trip gives it back (tuples as lists, nested
  configs as dicts): a config's field and the same field read back from a
  run's config.json compare equal."""
  return json.loads(json.dumps(value.to_dict() if isinstance(
      value, ml_collections.ConfigDict) else value))


def check_resumable(saved: dict, config, workdir) -> dict[str, tuple]:
  """Raises ConfigError when the run saved in `workdir` (its config.json,
  `saved`) differs from `config` in a field that changes what its
  checkpoints mean; other fields (intervals, eval batch size, data_dir) may
  change between a run and its resumption: returns those that did, as
  {name: (saved value, this value)}."""
  changed, differ = {}, []
  for name, field in FIELDS.items():
    here = comparable(config[name])
    there = comparable(saved.get(name, field.default))
    overriding = _SET_IN_STEPS_BY.get(name)
    if there == here or (overriding and config[overriding] and
                         saved.get(overriding) == config[overriding]):
      continue  # for an epoch count: the same length in steps decides
    if field.fixed_for_run:
      differ.append(f'{name} ({there!r} there, {here!r} here)')
    else:
      changed[name] = (there, here)
  if differ:
    raise ConfigError(
        f'{workdir} holds a run with another config.{"; config.".join(differ)}'
        ': its checkpoints are not this config\'s run. Rerun with the config '
        f'saved in {workdir}/config.json, or pass a new --workdir to start '
        'afresh.')
  return changed
