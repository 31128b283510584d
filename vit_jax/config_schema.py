"""Every field a training config has: its default, its meaning, its checks."""

import dataclasses
import difflib
import json
import math
import pathlib
from typing import Any, Callable

import ml_collections

from vit_jax import models
from vit_jax.errors import ConfigError
from vit_jax.formats import vit_model
from vit_jax.runtime import distributed
from vit_jax.training import compilation_cache

# The released models' pixels, in [-1, 1]: the default, and the paper's.
RELEASED_PIXELS = vit_model.RELEASED_PIXELS

# A number field's check: what its value must pass (a NaN passes none), and
# what the error says after `config.NAME=VALUE`.
_POSITIVE = (lambda v: v > 0, 'must be positive')
_NON_NEGATIVE = (lambda v: v >= 0, 'must be >= 0')
_FRACTION = (lambda v: 0 <= v < 1, 'must be in [0, 1)')
_PER_CHANNEL = (lambda v: isinstance(v, (tuple, list)) and len(v) == 3,
                'must be 3 numbers, one per RGB channel')


@dataclasses.dataclass(frozen=True)
class Field:
  default: Any
  doc: str
  choices: tuple[str, ...] | None = None
  # Whether a run may resume with another value (intervals, where the data
  # is, the evaluation batch, the machine's layout): the others change what
  # a run's checkpoints mean, and a workdir trained with another value is not
  # resumed (`check_resumable`). Fixed unless declared, so a new field cannot
  # silently mix two runs in one workdir.
  may_change_on_resume: bool = False
  check: tuple[Callable[[Any], bool], str] | None = None


FIELDS: dict[str, Field] = dict(
    # The model.
    model=Field('ViT-Tiny-CIFAR_4', 'A registered model '
                'name (vit_jax.models.registry).', models.MODEL_NAMES),
    model_overrides=Field(
        {}, "Model fields to change, e.g. {'dropout_rate': 0.0}; only 'remat' "
        "and 'attention' may change when a run resumes."),
    dtype=Field(
        'float32', 'Computation dtype; parameters and optimizer state stay '
        'float32.', ('float32', 'bfloat16')),
    init_from=Field(
        '', 'Fine-tune from this checkpoint: a run directory, a released .npz, '
        'timm, transformers; empty: from scratch.', may_change_on_resume=True),
    # The data.
    dataset=Field('cifar10', 'cifar10, cifar100, image_folder or tfds:NAME.'),
    data_dir=Field(
        '', 'Where the dataset is. Unset: $VIT_JAX_DATA_DIR, else '
        '~/.cache/vit_jax (docs/training.md).', may_change_on_resume=True),
    train_split=Field('train', 'Training split (tfds datasets).'),
    test_split=Field('test', 'Evaluation split (tfds datasets).'),
    train_examples=Field(
        0, 'Keep N training examples (docs/training.md, Data); 0: all.',
        check=_NON_NEGATIVE),
    train_examples_per_file=Field(
        0, 'CIFAR: keep the first N images of each of the 5 training files '
        '(the study: 1000); 0: all.', check=_NON_NEGATIVE),
    test_examples=Field(
        0, 'Keep N test examples; 0: all. Chosen as train_examples are.',
        check=_NON_NEGATIVE),
    validation_examples=Field(
        0, 'Hold out N examples the run never trains on, to choose the best '
        'step on (docs/training.md); 0: none.', check=_NON_NEGATIVE),
    validation_dir=Field(
        '', 'The folder validation_examples come from (docs/training.md).'),
    image_size=Field(32, 'Side of the square model input, in pixels.',
                     check=_POSITIVE),
    input_pipeline=Field(
        'on_device', "'on_device' (small data) or 'streaming' (ImageNet); "
        'docs/training.md, Input.', ('on_device', 'streaming')),
    input_workers=Field(
        -1, 'Streaming: grain worker processes loading batches on each host; '
        '-1: one per core it may use; 0: threads.', may_change_on_resume=True,
        check=(lambda v: v >= -1,
               'must be -1 (one per CPU core), 0 (threads) or a count')),
    augment=Field(
        True, 'Training augmentation: on device, 4-pixel-padded random crop + '
        'flip; streaming, Inception crop + flip.'),
    auto_augment=Field(
        'none', "Ops drawn per image after the crop and flip: "
        "'trivial_augment' or 'rand_augment' (vit_jax.data.auto_augment).",
        ('none', 'trivial_augment', 'rand_augment')),
    rand_augment_ops=Field(2, 'RandAugment: ops per image.',
                           check=_NON_NEGATIVE),
    rand_augment_magnitude=Field(
        9, 'RandAugment: magnitude, 0-10.',
        check=(lambda v: 0 <= v <= 10, 'must be in [0, 10]')),
    random_erasing=Field(
        0.0, 'Probability that a training image has a random rectangle erased.',
        check=(lambda v: 0 <= v <= 1, 'is a probability: use a value in '
               '[0, 1]')),
    mixup_alpha=Field(
        0.0, 'Mixup: images and labels mixed with the batch reversed, by '
        'Beta(alpha, alpha); 0: off.', check=_NON_NEGATIVE),
    cutmix_alpha=Field(
        0.0, 'CutMix: a box of the reversed batch pasted, labels mixed by its '
        'area; 0: off. With both alphas set, each step picks one at random.',
        check=_NON_NEGATIVE),
    distillation_teacher=Field(
        '', 'DeiT distillation: the workdir of a trained run whose predictions '
        "teach the student's distillation token; empty: none."),
    distillation_target=Field(
        'hard', "The distillation token learns the teacher's class ('hard', "
        "DeiT's) or its probabilities ('soft').", ('hard', 'soft')),
    distillation_temperature=Field(
        1.0, "The soft target's temperature (DeiT: 1; Hinton et al.: 2-20).",
        check=_POSITIVE),
    locality_guidance_teacher=Field(
        '', 'Locality guidance: the workdir of a trained CNN run to imitate '
        '(docs/training.md); empty: none.'),
    teacher_checkpoint=Field(
        'last', "The teachers' checkpoint read: 'last', the newest, or "
        "'best' (trained with keep_best_checkpoint).", ('last', 'best')),
    locality_guidance_weight=Field(
        2.5, 'Locality guidance: the weight of the imitation loss added to '
        'the objective (Li et al.: 2.5).', check=_NON_NEGATIVE),
    pixel_mean=Field(RELEASED_PIXELS[0], 'Per-channel mean '
                     'subtracted from pixels in [0, 1].', check=_PER_CHANNEL),
    pixel_std=Field(
        RELEASED_PIXELS[1], 'Per-channel std pixels are divided by.',
        check=(lambda v: _PER_CHANNEL[0](v) and min(v) > 0,
               'must be 3 positive numbers, one per RGB channel')),
    # How long, and how often.
    total_steps=Field(
        0, 'Optimizer steps of the run; 0: num_epochs epochs of the training '
        'split.', check=_NON_NEGATIVE),
    num_epochs=Field(0, 'Length in epochs, used when total_steps is 0.',
                     check=_NON_NEGATIVE),
    warmup_steps=Field(
        0, 'Linear warmup from 0, in steps; 0: warmup_epochs epochs.',
        check=_NON_NEGATIVE),
    warmup_epochs=Field(0, 'Warmup in epochs, used when warmup_steps is 0.',
                        check=_NON_NEGATIVE),
    lr_decay=Field('cosine', 'Decay to 0 at the last step after warmup.',
                   ('cosine', 'linear')),
    log_every_steps=Field(
        0, 'Train metrics logged every N steps (and at the last); 0: once an '
        'epoch.', may_change_on_resume=True, check=_NON_NEGATIVE),
    eval_every_steps=Field(
        0, 'Evaluated every N steps (and at the last); 0: once an epoch.',
        may_change_on_resume=True, check=_NON_NEGATIVE),
    checkpoint_every_steps=Field(
        0, 'Checkpointed every N steps (and at the last, and on SIGTERM); 0: '
        'once an epoch.', may_change_on_resume=True, check=_NON_NEGATIVE),
    checkpoint_min_seconds=Field(
        30.0, "With checkpoint_every_steps 0, skip an epoch's checkpoint "
        'begun less than this after the newest (docs/training.md, Steps).',
        may_change_on_resume=True, check=_NON_NEGATIVE),
    keep_checkpoints=Field(2, 'Newest checkpoints kept in the workdir.',
                           may_change_on_resume=True, check=_POSITIVE),
    keep_best_checkpoint=Field(
        False, 'Also keep the state of the best evaluation in '
        'workdir/best_checkpoint.', may_change_on_resume=True),
    steps_per_dispatch=Field(
        0, 'Most train steps one compiled call runs (docs/training.md).',
        may_change_on_resume=True, check=_NON_NEGATIVE),
    # The optimizer.
    batch_size=Field(128, 'Global batch size, over all devices and processes.',
                     check=_POSITIVE),
    grad_accumulation_steps=Field(
        1, 'Micro-batches each batch is split into, for memory (augmentation '
        'and BatchNorm statistics per micro-batch).', check=_POSITIVE),
    eval_batch_size=Field(256, 'Global evaluation batch size.',
                          may_change_on_resume=True, check=_POSITIVE),
    optimizer=Field('adamw', 'adamw, or sgd with momentum.', ('adamw', 'sgd')),
    learning_rate=Field(1e-3, 'Peak learning rate.', check=_POSITIVE),
    weight_decay=Field(
        0.0, "Weight decay: decoupled (optax's, scaled by the learning rate) "
        'for adamw, L2 added to the gradient for sgd.', check=_NON_NEGATIVE),
    weight_decay_on=Field(
        'all', "The parameters weight decay applies to: 'all' (the study's), "
        "or 'kernels', weight matrices and convolution kernels only (DeiT).",
        ('all', 'kernels')),
    adam_b1=Field(0.9, 'Adam beta1 (adamw).', check=_FRACTION),
    adam_b2=Field(0.999, 'Adam beta2 (adamw).', check=_FRACTION),
    momentum=Field(0.9, 'Momentum (sgd).', check=_FRACTION),
    grad_clip_norm=Field(0.0,
                         'Clip gradients to this global norm; 0: no clipping.',
                         check=_NON_NEGATIVE),
    label_smoothing=Field(0.0, 'Label smoothing of the cross-entropy.',
                          check=_FRACTION),
    ema_decay=Field(
        0.0, "Keep an exponential moving average of the parameters, the run's "
        'model, with this decay (DeiT: 0.99996); 0: none.', check=_FRACTION),
    seed=Field(
        0, 'Seeds initialization, shuffling, augmentation, dropout, and the '
        'subsets of a dataset ordered by class.', check=_NON_NEGATIVE),
    # The machine.
    fsdp=Field(
        1, 'Devices each large parameter and optimizer-state array is split '
        'over (FSDP, docs/training.md); -1: all.', may_change_on_resume=True),
    cpu_devices=Field(
        distributed.DEFAULT_CPU_DEVICES, 'Host devices the batch is split '
        'over on a CPU (--cpu_devices overrides).', may_change_on_resume=True,
        check=_NON_NEGATIVE),
    cpu_compiler_options=Field(
        {}, 'XLA options the steps compile with on a CPU (docs/training.md).',
        may_change_on_resume=True),
    compilation_cache_dir=Field(
        compilation_cache.DEFAULT_DIRECTORY, "jax's persistent compilation "
        'cache (docs/training.md); empty: off.', may_change_on_resume=True),
)

# Model fields that change how the step computes, never its parameters or
# their layout, so a run may resume with another value: which encoder blocks
# are recomputed in the backward pass, which kernel computes attention (a run
# begun on a CPU resumes with cuDNN's on a GPU). (A ViT's `scan` stacks the
# blocks' parameters, so its checkpoints hold another tree: it stays.)
_OVERRIDES_MAY_CHANGE = ('remat', 'attention')

# Epoch-counted fields and the step-counted fields that take their place
# when set (`training.plan.step_plan`).
_SET_IN_STEPS_BY = dict(num_epochs='total_steps', warmup_epochs='warmup_steps')


def defaults(**overrides) -> ml_collections.ConfigDict:
  """A config holding every field at its default, but those `overrides` set."""
  config = ml_collections.ConfigDict({n: f.default for n, f in FIELDS.items()})
  config.update(overrides)
  return config


def _guess(value, choices) -> str:
  """' (did you mean X?)': the choice `value` begins, else the closest."""
  lower = {str(choice).lower(): choice for choice in choices}
  key = str(value).lower()
  close = ([k for k in lower if key and k.startswith(key)] or
           difflib.get_close_matches(key, lower, 1))
  return f' (did you mean {lower[close[0]]!r}?)' if close else ''


# The paths config.json records absolute, so that any directory reads them.
DATA_PATHS = ('data_dir', 'validation_dir')


def absolute(path: str) -> str:
  """`path` absolute, `~` expanded; '' stays ''."""
  return path and str(pathlib.Path(path).expanduser().absolute())


def validate(config: ml_collections.ConfigDict, num_devices: int,
             training: bool = True):
  """Raises ConfigError for a config that cannot run on `num_devices`."""
  if unknown := [name for name in config.keys() if name not in FIELDS]:
    raise ConfigError(f'config.{unknown[0]} is not a field of the config '
                      f'schema{_guess(unknown[0], FIELDS)}; the fields are '
                      'listed in vit_jax/config_schema.py.')
  if missing := [name for name in FIELDS if name not in config]:
    raise ConfigError(f'The config lacks {", ".join(missing)}: start it from '
                      'vit_jax.config_schema.defaults().')
  for name, field in FIELDS.items():
    value = config[name]
    if field.choices and value not in field.choices:
      raise ConfigError(
          f'config.{name}={value!r}{_guess(value, field.choices)}; '
          f'use one of {field.choices}.')
    if isinstance(value, float) and not math.isfinite(value):
      raise ConfigError(f'config.{name}={value} must be a finite number.')
    if field.check and not field.check[0](value):
      raise ConfigError(f'config.{name}={value} {field.check[1]}.')
  if training:  # the model checked before any data loads
    models.from_config(config, num_classes=1)
    if config.init_from is None:  # a fine-tuning config's placeholder
      raise ConfigError('config.init_from is unset: pass the run directory or '
                        '.npz to fine-tune as --config.init_from=PATH.')
  if not config.total_steps and not config.num_epochs:
    raise ConfigError('Set config.total_steps or config.num_epochs: the run '
                      'has no length.')
  # Each field with the one it needs: a teacher's student and the reverse,
  # the validation folder's count.
  has_token = bool(config.model_overrides.get('distillation_token', False))
  guided = bool(config.model_overrides.get('guided_blocks', ()))
  for wrong, message in (
      (config.distillation_teacher and not has_token,
       f'config.distillation_teacher={config.distillation_teacher} needs a '
       'student with a distillation token: add '
       '--config.model_overrides.distillation_token=True (a ViT).'),
      (has_token and not config.distillation_teacher,
       'config.model_overrides.distillation_token=True needs a teacher: set '
       '--config.distillation_teacher to the workdir of a trained run.'),
      (config.locality_guidance_teacher and not guided,
       f'config.locality_guidance_teacher={config.locality_guidance_teacher} '
       'needs a ViT with guided blocks: set '
       "--config.model_overrides.guided_blocks (e.g. '(0, 3, 5)') and "
       "guidance_widths (the CNN's stage widths)."),
      (guided and not config.locality_guidance_teacher,
       'config.model_overrides.guided_blocks is set but there is no CNN to '
       'imitate: set --config.locality_guidance_teacher to the workdir of a '
       'trained simple_cnn or small_resnet run.'),
      (config.teacher_checkpoint == 'best' and
       not config.distillation_teacher and not config.locality_guidance_teacher,
       "config.teacher_checkpoint='best' picks a teacher's checkpoint, and "
       'this run has none: set --config.distillation_teacher or '
       '--config.locality_guidance_teacher, or leave it at last.'),
      (config.validation_dir and not config.validation_examples,
       f'config.validation_dir={config.validation_dir} holds validation '
       'examples, but config.validation_examples=0 holds none out: set how '
       'many, e.g. --config.validation_examples=5000.')):
    if wrong:
      raise ConfigError(message)
  if config.fsdp != -1 and (config.fsdp < 1 or num_devices % config.fsdp):
    raise ConfigError(
        f'config.fsdp={config.fsdp} does not divide the {num_devices} '
        f'devices; use a divisor of {num_devices}, or -1 for all of them.')
  for name in ('batch_size', 'eval_batch_size')[0 if training else 1:]:
    if config[name] % num_devices:
      raise ConfigError(
          f'config.{name}={config[name]} is not divisible by the '
          f'{num_devices} devices; use a multiple of {num_devices} (on a CPU, '
          'config.cpu_devices sets the number of devices).')
  accumulation = config.grad_accumulation_steps
  if training and config.batch_size % (accumulation * num_devices):
    raise ConfigError(f'config.grad_accumulation_steps={accumulation} '
                      f'must split config.batch_size={config.batch_size} into '
                      f'micro-batches divisible by the {num_devices} devices.')


def comparable(value) -> Any:
  """`value` as its JSON round trip (a run's config.json) gives it back."""
  if isinstance(value, ml_collections.ConfigDict):
    value = value.to_dict()
  return json.loads(json.dumps(value))


def check_resumable(saved: dict, config, workdir) -> dict[str, tuple]:
  """ConfigError for a changed fixed field; {name: (saved, this)} of others."""
  changed, differ = {}, []
  for name, field in FIELDS.items():
    here = comparable(config[name])
    there = comparable(saved.get(name, field.default))
    if name in DATA_PATHS:  # a run saved with them as given
      there = absolute(there)
    if name == 'model_overrides':
      # Overriding a field with the model's own value changes nothing: a
      # saved config that lacks a field matches one that sets its default.
      defaults = models.default_fields(config.model)
      for side, other in ((there, here), (here, there)):
        for key in [k for k in side if k not in other and k in defaults]:
          if side[key] == comparable(defaults[key]):
            del side[key]
      for key in _OVERRIDES_MAY_CHANGE:
        before, after = there.pop(key, None), here.pop(key, None)
        if before != after:
          changed[f'{name}.{key}'] = (before, after)
    overriding = _SET_IN_STEPS_BY.get(name)
    if there == here or (overriding and config[overriding] and
                         saved.get(overriding) == config[overriding]):
      continue  # for an epoch count: the same length in steps decides
    if not field.may_change_on_resume:
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
