"""The config schema: defaults, validation, changes a resumed run refuses."""

import pytest

from tests import helpers
from vit_jax import config_schema
from vit_jax.config_schema import ConfigError
from vit_jax.config_schema import check_resumable


def test_every_field_has_a_default_and_a_doc():
  assert set(config_schema.defaults().keys()) == set(config_schema.FIELDS)
  for name, field in config_schema.FIELDS.items():
    assert field.doc.strip(), name
    if field.choices:
      assert field.default in field.choices, name


def test_a_missing_field_is_named():
  # An unknown one: tests/test_main.py, through the command line.
  config = helpers.tiny_config('')
  del config['seed']
  with pytest.raises(ConfigError, match='lacks seed'):
    config_schema.validate(config, 1)


def test_the_batches_and_fsdp_must_fit_the_devices():
  for fields, devices, message in (
      (dict(batch_size=12), 8, 'batch_size=12 is not divisible by the 8 '
       'devices'), (dict(batch_size=16, grad_accumulation_steps=3), 1,
                    'grad_accumulation_steps=3'),
      (dict(fsdp=3), 8, 'config.fsdp=3 does not divide the 8 devices; use a '
       'divisor of 8, or -1')):
    with pytest.raises(ConfigError, match=message):
      config_schema.validate(helpers.tiny_config('', **fields), devices)
  config_schema.validate(helpers.tiny_config('', fsdp=-1), num_devices=8)


def test_a_number_out_of_its_fields_range_is_named():
  for field, value, message in (
      ('input_workers', -2, 'input_workers=-2 must be -1 .*, 0 .* or a count'),
      ('rand_augment_magnitude', 11,
       r'rand_augment_magnitude=11 must be in \[0, 10\]'),
      ('random_erasing', 1.5,
       r'random_erasing=1.5 is a probability: use a value in \[0, 1\]'),
      ('ema_decay', 1.0, r'ema_decay=1.0 must be in \[0, 1\)'),
      ('seed', -1,
       'seed=-1 must be >= 0'), ('learning_rate', float('inf'),
                                 'learning_rate=inf must be a finite'),
      ('grad_clip_norm', float('inf'), 'grad_clip_norm=inf must be a finite'),
      ('weight_decay', float('nan'), 'weight_decay=nan must be a finite'),
      ('adam_b2', 1.0, r'adam_b2=1.0 must be in \[0, 1\)'),
      ('pixel_mean', (0.5, 0.5), r'pixel_mean=\(0.5, 0.5\) must be 3 numbers'),
      ('pixel_std', (0, 1, 1), r'pixel_std=\(0, 1, 1\) must be 3 positive'),
      ('validation_dir', '/v', 'validation_examples=0 holds none out: set how '
       'many, e.g. --config.validation_examples=5000')):
    with pytest.raises(ConfigError, match=message):
      config_schema.validate(helpers.tiny_config('', **{field: value}), 1)


def test_resuming_refuses_what_changes_the_checkpoints_meaning(tmp_path):
  saved = helpers.tiny_config('').to_dict()
  assert check_resumable(
      saved, helpers.tiny_config('', log_every_steps=5, eval_batch_size=64),
      tmp_path) == {'log_every_steps': (0, 5), 'eval_batch_size': (16, 64)}
  for field in ('seed', 'test_examples'):  # the test set is the run's too
    with pytest.raises(
        ConfigError, match=rf'another config\.{field} \(0 there, 1 '
        r'here\).*config\.json, or pass a new --workdir'):
      check_resumable(saved, helpers.tiny_config('', **{field: 1}), tmp_path)
  # Data paths saved as given resume as the absolute paths they name.
  absolute = helpers.tiny_config(config_schema.absolute('d'),
                                 validation_dir=config_schema.absolute('~/v'))
  assert check_resumable(dict(saved, data_dir='d', validation_dir='~/v'),
                         absolute, tmp_path) == {}
  # An epoch count that total_steps overrides on both sides is not used.
  in_steps = helpers.tiny_config('', total_steps=40, warmup_steps=4).to_dict()
  check_resumable(
      in_steps,
      helpers.tiny_config('', total_steps=40, warmup_steps=4, num_epochs=7,
                          warmup_epochs=3), tmp_path)
  with pytest.raises(ConfigError, match=r'config\.total_steps \(40 there, 50'):
    check_resumable(in_steps, helpers.tiny_config('', total_steps=50), tmp_path)


def test_a_resumed_runs_model_overrides(tmp_path):
  """remat and attention may change; overriding to the model's value is none."""
  config = lambda **fields: helpers.tiny_config('', model_fields=fields)
  saved = config(remat='full', scan=True).to_dict()
  changes = lambda **o: check_resumable(saved, config(scan=True, **o), tmp_path)
  assert changes(remat='none') == {'model_overrides.remat': ('full', 'none')}
  assert changes(remat='full') == {}
  assert changes(remat='full', attention='cudnn') == {
      'model_overrides.attention': (None, 'cudnn')
  }
  with pytest.raises(
      ConfigError, match=r"another config\.model_overrides "
      r"\(\{.*'scan': True.*\} there, \{.*\} here\)"):
    check_resumable(saved, config(remat='full'), tmp_path)
  plain, same = config(), config(mimetic_init=False, posemb='learned')
  assert check_resumable(plain.to_dict(), same, tmp_path) == {}
  assert check_resumable(same.to_dict(), plain, tmp_path) == {}
  with pytest.raises(
      ConfigError, match=r"another config\.model_overrides "
      r"\(.* there, .*'mimetic_init': True.* here\)"):
    check_resumable(plain.to_dict(), config(mimetic_init=True), tmp_path)


def test_a_student_without_its_teacher_or_the_reverse_is_refused():
  cnn, none = dict(locality_guidance_teacher='/tmp/cnn'), {}
  for teacher, student, message in (
      (dict(distillation_teacher='/tmp/vit'), dict(distillation_token=False),
       'needs a student with a distillation token'),
      (none, dict(distillation_token=True),
       'needs a teacher'), (cnn, none, 'needs a ViT with guided blocks'),
      (none, dict(guided_blocks=(0,)), 'there is no CNN to imitate'),
      (dict(teacher_checkpoint='best'), none, "teacher_checkpoint='best' "
       "picks a teacher's checkpoint, and this run has none")):
    with pytest.raises(ConfigError, match=message):
      config_schema.validate(
          helpers.tiny_config('', model_fields=student, **teacher), 1)
