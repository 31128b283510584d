"""The command line: config overrides and clean errors."""

import json
import shutil

import pytest

from tests import helpers


def _main(*flags, config='configs/cifar_small.py', status=None):
  return helpers.run_module('vit_jax.main', f'--config={config}', *flags,
                            status=status)


# A relative data_dir is made absolute, as config.json records it.
@pytest.mark.parametrize(
    'flag,said',
    [('--config.data_dir=nowhere',
      f'error: The data directory {helpers.ROOT}/nowhere does not exist: pass '
      'the one that holds the dataset (--config.data_dir=DIR; --data_dir=DIR '
      'to evaluate or analyze a run whose data moved).'),
     ('stray', 'error: unexpected arguments stray; every argument is a flag '
      '(--workdir=DIR, --config.FIELD=VALUE).'),
     ('--workdir=', 'error: --workdir is empty: pass the folder the run '
      'writes to.'),
     ('--config.num_epoch=1', 'error: config.num_epoch is not a field of the '
      "config schema (did you mean 'num_epochs'?); the fields are listed in "
      'vit_jax/config_schema.py.'),
     ('--process_id=1', 'error: --process_id=1 needs --num_processes: give '
      'both (and --coordinator_address), or neither inside SLURM, Open MPI or '
      'a Cloud TPU job, which set them.'),
     ('--config.learning_rate=1e-3x', 'error: --config.learning_rate=1e-3x: '
      'config.learning_rate is a number (the config: 0.001).'),], ids=[
          'data_dir', 'stray_argument', 'empty_workdir', 'unknown_field',
          'cluster_flags', 'wrong_kind'
      ])
def test_bad_input_is_one_clear_line_printed_once_not_a_traceback(
    tmp_path, flag, said):
  out = _main(f'--workdir={tmp_path / "run"}', '--config.num_epochs=1', flag,
              status=1)
  assert said in out.stderr.splitlines() and out.stderr.count(said) == 1
  assert 'Traceback' not in out.stderr
  assert not (tmp_path / 'run').exists()  # nothing was written


# A typo in one: test_models_registry.py's line, which test_models_vit shows
# is a ConfigError, one line here.
@pytest.mark.slow  # a training run in a process of its own
def test_any_model_field_can_be_overridden(cifar10_dir, tmp_path):
  # cifar_small.py lists only dropout_rate among the model's fields.
  out = _main(f'--workdir={tmp_path / "run"}',
              '--config.model_overrides.num_layers=1',
              f'--config.data_dir={cifar10_dir}',
              '--config.train_examples_per_file=0', '--config.batch_size=16',
              '--config.eval_batch_size=16', '--config.test_examples=0',
              '--config.total_steps=1', '--cpu_devices=1', status=0)
  assert 'ViT-Tiny-CIFAR_4 (214,538 parameters)' in out.stderr  # 1 layer


def test_the_config_or_the_flag_sets_the_cpu_devices_the_run_records(
    trained_vit_run, tmp_path):
  """A rerun on another count says it changed, before anything trains."""
  workdir = shutil.copytree(trained_vit_run[0], tmp_path / 'run')
  config_file = helpers.write_process_config(tmp_path, trained_vit_run[1],
                                             'trained_vit_config')
  for devices, flags in (2, ['--cpu_devices=2']), (4, []):  # the config's 4
    out = _main(f'--workdir={workdir}', *flags, config=config_file, status=0)
    assert json.loads(
        (workdir / 'config.json').read_text())['cpu_devices'] == devices
    assert f'on {devices} device(s)' in out.stderr
  assert helpers.history(workdir, 'config_changes.jsonl') == [{
      'step': 6, 'changed': {'cpu_devices': {'before': 4, 'after': 2}}
  }, {'step': 6, 'changed': {'cpu_devices': {'before': 2, 'after': 4}}}]
