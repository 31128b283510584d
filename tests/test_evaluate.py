"""python -m vit_jax.evaluate: the command, its flags and its output."""

import json
import re
import shutil
import signal

from tests import helpers
from tests.test_training_evaluation import _as_logged
from vit_jax.checkpoints import export


def test_its_npz_evaluates_the_same_with_a_config_file_on_the_flags_devices(
    trained_vit_run, tmp_path):
  workdir, data_dir = trained_vit_run
  npz = tmp_path / 'run.npz'
  export.convert(workdir, npz, 'npz')
  # The flag's 2 devices, not the config's 3 (its evaluation batches of 16 do
  # not split over 3); its training batch, split over neither, is not used.
  out = helpers.run_module(
      'vit_jax.evaluate', f'--checkpoint={npz}',
      '--config=configs/cifar_small.py', f'--data_dir={data_dir}',
      '--config.train_examples_per_file=0', '--config.test_examples=0',
      '--config.image_size=24', '--config.cpu_devices=3',
      '--config.batch_size=15', '--config.eval_batch_size=16',
      '--cpu_devices=2', status=0)
  result = json.loads(out.stdout.splitlines()[-1])
  _as_logged(result, workdir)  # its top-1 and loss
  assert result['examples'] == 37 and result['format'] == 'npz'
  assert 'evaluated' in out.stderr  # progress


def test_two_processes_evaluate_a_run_to_the_accuracy_it_logged(
    trained_vit_run, tmp_path):
  """Every example counted once over both; process 0 prints the result."""
  workdir, _ = trained_vit_run
  processes, logs = helpers.start_two_process_job(
      ['vit_jax.evaluate', f'--checkpoint={workdir}'], tmp_path)
  statuses = helpers.wait_all(processes, timeout=240)
  outputs = [log.read_text() for log in logs]
  assert statuses == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
  results = [[
      json.loads(line) for line in output.splitlines() if line.startswith('{')
  ] for output in outputs]
  assert results[1] == []
  _as_logged(results[0][-1], workdir)
  assert results[0][-1]['examples'] == 37
  assert '[process 1/2]' in outputs[1]
  # Orbax's records of reading the checkpoint, and jax's of the backends it
  # tried, are not the command's output.
  assert not re.search(
      r'checkpoint_manager|checkpoint_handler|orbax|'
      r'xla_bridge', outputs[0]), outputs[0]


def test_a_process_that_evaluates_another_config_stops_the_job_in_one_line(
    trained_vit_run, tmp_path, monkeypatch):
  """Its batches would not match the others' collectives: a native abort."""
  (tmp_path / 'sitecustomize.py').write_text(
      "import sys\nif '--process_id=1' in sys.argv:\n"
      "  sys.argv.append('--config.eval_batch_size=8')\n")
  monkeypatch.setenv('PYTHONPATH', str(tmp_path))
  processes, logs = helpers.start_two_process_job(
      ['vit_jax.evaluate', f'--checkpoint={trained_vit_run[0]}'], tmp_path)
  assert helpers.wait_all(processes, timeout=120) == [1, 1]
  said = ('error: Process(es) [1] evaluate another config than process 0 (its '
          "flags, --config file or the run's config.json): start every process "
          'with the same flags; every host must see the same files.')
  for output in (log.read_text() for log in logs):
    assert [s for s in output.splitlines() if s.startswith('error')] == [said]


def test_a_run_evaluates_on_its_configs_cpu_devices_and_overrides(
    trained_vit_run, tmp_path):
  workdir = shutil.copytree(trained_vit_run[0], tmp_path / 'run')
  # Its eval batches of 16 do not split over 3.
  helpers.edit_json(workdir / 'config.json', cpu_devices=3)
  out = helpers.run_module('vit_jax.evaluate', f'--checkpoint={workdir}')
  assert out.returncode == 1 and 'not divisible by the 3 devices' in out.stderr
  assert 'Traceback' not in out.stderr
  # An override applies to the run's own config.
  out = helpers.run_module('vit_jax.evaluate', f'--checkpoint={workdir}',
                           '--config.eval_batch_size=12', status=0)
  _as_logged(json.loads(out.stdout.splitlines()[-1]), workdir)
  # A mistyped one is one line, as in training (--checkpoint DIR read too).
  out = helpers.run_module('vit_jax.evaluate', '--checkpoint', workdir,
                           '--config.eval_batchsize=12')
  assert out.returncode == 1 and out.stderr.splitlines()[-1] == (
      "error: config.eval_batchsize is not a field of the config schema (did "
      "you mean 'eval_batch_size'?); the fields are listed in "
      "vit_jax/config_schema.py.")


# Ctrl-C: the test below shows evaluate stops by `stop_signals.catch(at_once=)`,
# which tests/test_runtime_stop_signals.py shows ends a command on Ctrl-C.
def test_sigterm_stops_a_two_process_evaluation_at_once(trained_vit_run,
                                                        tmp_path):
  """The evaluation takes SIGTERM back from jax's preemption service."""
  processes, logs = helpers.start_two_process_job(
      ['vit_jax.evaluate', f'--checkpoint={trained_vit_run[0]}'], tmp_path)
  # Until both have joined the job: then they log as '[process i/2]'.
  helpers.wait_until(
      lambda: all('[process ' in log.read_text() for log in logs), 120,
      processes, lambda: [log.read_text()[-2000:] for log in logs])
  for process in processes:
    process.send_signal(signal.SIGTERM)
  statuses = helpers.wait_all(processes, timeout=30)
  assert statuses == [75, 75], [log.read_text()[-2000:] for log in logs]
  for log in logs:
    text = log.read_text()
    assert text.strip().splitlines()[-1] == (
        'SIGTERM: stopped the evaluation; it wrote nothing.')
    assert 'Traceback' not in text
