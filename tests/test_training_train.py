"""The training loop end to end on a tiny CIFAR-10 (faults: test_faults.py)."""

import datetime
import json
import math
import os
import pathlib
import re
import shutil
import signal

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import cifar_small
from tests import helpers
from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.config_schema import ConfigError
from vit_jax.data import preprocess
from vit_jax.errors import TrainingDivergedError
from vit_jax.errors import WorkdirError
from vit_jax.runtime import preemption
from vit_jax.training import flops
from vit_jax.training import provenance
from vit_jax.training import train


def final_state(workdir, step):
  with ocp.CheckpointManager(pathlib.Path(workdir) / 'checkpoints') as manager:
    return manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore())).state


# The cifar_small ViT's train losses and test loss over 3 steps, on 128
# synthetic images in batches of 32 (1 device): another model, optimizer,
# schedule or data order changes them.
_PINNED_TRAIN_LOSSES = (2.3025848865509033, 2.3025851249694824,
                        2.3041083812713623)
_PINNED_TEST_LOSS = 2.3033313751220703  # unsmoothed: the true labels


def test_the_study_vit_computes_the_losses_it_always_did(tmp_path):
  helpers.cifar10_release(tmp_path / 'data', 128, 40, seeds=(11, 12))
  config = cifar_small.get_config('vit')
  config.update(data_dir=str(tmp_path / 'data'), train_examples_per_file=0,
                test_examples=0, batch_size=32, eval_batch_size=40,
                total_steps=3, log_every_steps=1, eval_every_steps=3)
  train.train_and_evaluate(config, tmp_path / 'run')
  records = helpers.history(tmp_path / 'run')
  np.testing.assert_allclose([r['train_loss'] for r in records],
                             _PINNED_TRAIN_LOSSES, rtol=2e-6)
  assert records[-1]['test_loss'] == pytest.approx(_PINNED_TEST_LOSS, rel=2e-6)


@pytest.mark.parametrize(
    'variant',
    ['vit', pytest.param('simple_cnn', marks=pytest.mark.slow)],
    ids=['scanned_vit', 'simple_cnn'])
def test_steps_set_when_it_logs_evaluates_and_checkpoints_and_resumes_exactly(
    cifar10_dir, tmp_path, variant):
  """The ViT's blocks scanned and rematerialized: restored as a stacked tree."""
  # 96 images: 6 steps an epoch
  # 18 steps, as other runs here: their programs are in the suite's cache.
  scanned = dict(num_layers=2, scan=True, remat='full')
  config = helpers.tiny_config(cifar10_dir, variant, total_steps=18,
                               log_every_steps=5, eval_every_steps=8,
                               checkpoint_every_steps=4, keep_checkpoints=3,
                               model_fields=scanned if variant == 'vit' else {})
  summary = train.train_and_evaluate(config, tmp_path / 'whole')
  records = helpers.history(tmp_path / 'whole')
  assert [r['step'] for r in records] == [5, 8, 10, 15, 16, 18]
  assert [r['step'] for r in records if 'test_loss' in r] == [8, 16, 18]
  assert [r['step'] for r in records if 'train_loss' in r] == [5, 10, 15, 18]
  assert [r['epoch'] for r in records[:3]] == [0.8333, 1.3333, 1.6667]
  logged = records[0]
  assert logged['learning_rate'] > 0 and logged['images_per_second'] > 0
  # The rate the last step trained at, not the 0 the decay ends at after it.
  assert records[-1]['learning_rate'] > 0
  assert logged['flops_per_second'] > 0 and 'peak_share' not in logged  # CPU
  assert helpers.steps_saved(tmp_path / 'whole') == [12, 16, 18]
  best = max((r for r in records if 'test_loss' in r),
             key=lambda r: r['test_accuracy'])
  assert (summary['steps'], summary['best_step']) == (18, best['step'])
  assert summary['device'] == jax.devices()[0].device_kind

  # Checkpoint 16 is mid-epoch and mid logging interval (steps 16-18): its
  # train-metric sums are part of what it saves.
  shutil.copytree(tmp_path / 'whole', tmp_path / 'resumed')
  shutil.rmtree(tmp_path / 'resumed' / 'checkpoints' / '18')
  train.train_and_evaluate(config, tmp_path / 'resumed')
  assert helpers.untimed_history(
      tmp_path / 'resumed') == helpers.untimed_history(tmp_path / 'whole')
  state = final_state(tmp_path / 'whole', 18)
  jax.tree.map(np.testing.assert_array_equal,
               final_state(tmp_path / 'resumed', 18), state)
  if variant == 'vit':
    blocks = state['params']['Transformer']
    assert 'encoderblock_0' not in blocks
    assert blocks['encoderblock']['LayerNorm_0']['scale'].shape == (2, 16)
    # Unscanned, the checkpoints would be another tree: refused.
    config.model_overrides.scan = False
    with pytest.raises(ConfigError, match=r'another config\.model_overrides'):
      train.train_and_evaluate(config, tmp_path / 'resumed')


def test_by_default_it_logs_evaluates_and_checkpoints_once_an_epoch(
    cifar10_dir, tmp_path):
  """Checkpoints at most every checkpoint_min_seconds, the first epoch's too."""
  # With more seconds than the run takes: the first epoch (none was saved
  # before it) and the last step (test_checkpoints_run_checkpoints: the pace).
  train.train_and_evaluate(
      helpers.tiny_config(cifar10_dir, num_epochs=3, checkpoint_min_seconds=1e9,
                          keep_checkpoints=5), tmp_path)
  records = helpers.history(tmp_path)
  assert [(r['step'], r['epoch']) for r in records] == [(6, 1.0), (12, 2.0),
                                                        (18, 3.0)]
  assert all('train_loss' in r and 'test_loss' in r for r in records)
  assert helpers.steps_saved(tmp_path) == [6, 18]


@pytest.fixture(scope='module')
def one_epoch_run(tmp_path_factory):
  """(config, workdir, summary, test split): 6 steps on 96 images, 37 tested."""
  root = tmp_path_factory.mktemp('one_epoch_run')
  config = helpers.tiny_config(helpers.cifar10_release(root / 'data', 96),
                               num_epochs=1)
  with pytest.MonkeyPatch.context() as patch:
    # The checkout moves once the run has saved a checkpoint.
    saved = lambda: any((root / 'run' / 'checkpoints').glob('[0-9]*'))
    patch.setattr(provenance, 'commit', lambda: ('b' if saved() else 'a') * 40)
    summary = train.train_and_evaluate(config, root / 'run')
  return (config, root / 'run', summary, helpers.random_cifar(37, 10, seed=3))


def test_a_finished_run_scored_each_test_example_once_and_reruns_uncompiled(
    one_epoch_run, caplog):
  config, workdir, first, (images, labels) = one_epoch_run
  before = helpers.history(workdir)
  written = (workdir / 'summary.json').stat().st_mtime_ns
  caplog.set_level('INFO')
  caplog.clear()
  again = train.train_and_evaluate(config, workdir)
  assert helpers.history(workdir) == before
  # Its summary as the run that trained it wrote it (machine, FLOPs, commit).
  assert again == first
  assert (workdir / 'summary.json').stat().st_mtime_ns == written
  assert 'already holds all 6 steps; nothing to train' in caplog.text
  assert 'Compiled' not in caplog.text and (
      f"Done: best test accuracy {100 * first['best_test_accuracy']:.2f}% at "
      f"step {first['best_step']}") in caplog.text
  # Where the results come from: the checkout as the run started, this
  # machine, a date.
  assert first['commit'] == 'a' * 40
  assert re.fullmatch(r'[0-9a-f]{40}(\+changes)?', provenance.commit())
  assert first['cpu'].endswith(f'{os.cpu_count()} cores')
  assert datetime.datetime.fromisoformat(first['finished']).tzinfo
  # Where its seconds went: the start-up's phases, and each record's.
  assert list(first['startup_seconds']) == [
      'imports', 'backend', 'input', 'model', 'compile', 'restore', 'setup'
  ]
  (record,) = before
  assert {'input', 'steps', 'evaluation',
          'other'} <= set(record['phase_seconds'])
  assert sum(record['phase_seconds'].values()) == pytest.approx(
      record['seconds'], abs=1e-3)
  # Its compute: 6 steps of 16 images, each 3x the forward pass's matmuls.
  model = models.from_config(config, 10)
  params = final_state(workdir, 6)['params']
  assert first['train_flops'] == 6 * 16 * 3 * flops.forward_flops_per_image(
      model, {'params': params}, 32)
  # Its evaluation: all 37 test examples, in batches of 16.
  assert record['test_examples'] == 37
  # One program, not one per operation.
  logits = jax.jit(lambda p, x: model.apply({'params': p}, x, train=False))(
      params,
      preprocess.eval_input(images, image_size=32, mean=config.pixel_mean,
                            std=config.pixel_std))
  accuracy = float(np.mean(np.argmax(logits, -1) == labels))
  assert record['test_accuracy'] == pytest.approx(accuracy, abs=1e-6)


def test_nan_loss_stops_and_says_what_is_kept(cifar10_dir, tmp_path):
  # Step 1's update (learning rate 1e38) overflows the parameters.
  config = helpers.tiny_config(cifar10_dir, learning_rate=1e38, warmup_epochs=0,
                               log_every_steps=1, checkpoint_every_steps=1)
  with pytest.raises(TrainingDivergedError) as raised:
    train.train_and_evaluate(config, tmp_path)
  records = helpers.history(tmp_path)
  assert helpers.steps_saved(tmp_path) == [r['step'] for r in records] == [1]
  assert str(raised.value) == (
      'The train loss became nan by step 2; stopped without saving. Kept: the '
      f'newest checkpoint, step 1 in {tmp_path / "checkpoints"}, saved after '
      f'a train loss of {records[0]["train_loss"]:.4g} (logged at step 1). '
      'To go on from it with a lower learning rate or gradient clipping, '
      "fine-tune its weights in a new workdir (this one keeps its run's "
      'settings; the head, optimizer state and schedule start afresh there): '
      f'--workdir=NEW_DIR --config.init_from={tmp_path} '
      '--config.learning_rate=LOWER (or --config.grad_clip_norm=1).')


# Slow: test_nan_loss_stops_and_says_what_is_kept checks the message's
# every word in the suite.
@pytest.mark.slow
def test_a_run_diverging_for_steps_is_told_so_and_the_advice_works(
    cifar10_dir, tmp_path):
  # SGD at learning rate 10: the loss grows for steps, then is not finite.
  diverging = dict(optimizer='sgd', momentum=0.9, warmup_epochs=0, num_epochs=2,
                   log_every_steps=1, checkpoint_every_steps=2)
  config = helpers.tiny_config(cifar10_dir, learning_rate=10.0, **diverging)
  with pytest.raises(TrainingDivergedError) as raised:
    train.train_and_evaluate(config, tmp_path / 'run')
  records = helpers.history(tmp_path / 'run')
  kept = helpers.steps_saved(tmp_path / 'run')[-1]
  before = [r for r in records if r['step'] <= kept][-1]
  assert before['train_loss'] > 1e3
  assert (f'Kept: the newest checkpoint, step {kept} in '
          f'{tmp_path / "run" / "checkpoints"}, saved after a train loss of '
          f'{before["train_loss"]:.4g} (logged at step {kept}), far above the '
          f'lowest, {records[0]["train_loss"]:.4g} at step 1: the run was '
          'diverging already. To go on, start afresh in a new workdir with a '
          'lower learning rate') in str(raised.value)
  # The advice, followed.
  config = helpers.tiny_config(cifar10_dir, learning_rate=0.1, **diverging)
  train.train_and_evaluate(config, tmp_path / 'new')
  assert all(
      math.isfinite(r['train_loss']) for r in helpers.history(tmp_path / 'new'))


_LOSS_SCRIPT = '''
import json, jax
from tests.helpers import tiny_config
from vit_jax.training import train
config = tiny_config({data_dir!r}, num_epochs=1, batch_size=16)
train.train_and_evaluate(config, {workdir!r})
print(json.dumps([jax.device_count(), {workdir!r}]))
'''


@pytest.mark.slow  # 30 s; the 2-process tests split the batch too
def test_eight_devices_give_the_single_device_loss(cifar10_dir, tmp_path):
  records = {}
  for devices in (1, 8):
    workdir = str(tmp_path / f'devices_{devices}')
    out = helpers.run_on_host_devices(
        _LOSS_SCRIPT.format(data_dir=str(cifar10_dir), workdir=workdir),
        devices)
    assert json.loads(out.splitlines()[-1])[0] == devices
    records[devices] = helpers.history(workdir)[-1]
  for metric in ('train_loss', 'test_loss'):
    assert records[8][metric] == pytest.approx(records[1][metric], abs=1e-5)


@pytest.mark.parametrize('overrides,message', [
    (dict(learning_rate=0.0), 'learning_rate=0.0 must be positive'),
    (dict(num_epochs=-1), 'num_epochs=-1 must be >= 0'),
    (dict(checkpoint_min_seconds=float('nan')),
     'checkpoint_min_seconds=nan must be a finite number'),
    (dict(num_epochs=0), 'Set config.total_steps or config.num_epochs'),
    (dict(optimizer='lamb'), "optimizer='lamb'"),
    (dict(dtype='float16'), "dtype='float16'"),
    (dict(model='vit-tiny'),
     r"model='vit-tiny' \(did you mean 'ViT-Tiny-CIFAR_4'\?\)"),
    (dict(dataset='imagenet'), "Unknown dataset 'imagenet'"),
    (dict(image_size=30),
     'image_size=30 does not fit.*not divisible by the patch size 8'),
    (dict(batch_size=512), 'batch_size=512 is larger than the 96 training'),
    (dict(model_overrides={'depth': 2}, data_dir='/no'), 'no field.*depth'),
    (dict(lr_decay='step'), "lr_decay='step'"),
    (dict(input_pipeline='tf.data'), "input_pipeline='tf.data'"),
    (dict(cpu_compiler_options={'xla_cpu_no_such_option': '1'}),
     "No such compile option: 'xla_cpu_no_such_option'"),
    (dict(data_dir='{workdir}'), 'is config.data_dir, which the run reads'),
    (dict(variant='simple_cnn', ema_decay=0.9),
     'config.ema_decay=0.9 averages the parameters only, and SimpleCNN also '
     'keeps BatchNorm'),
])
def test_bad_input_is_a_clear_error_before_anything_is_written(
    cifar10_dir, tmp_path, overrides, message):
  overrides = dict(overrides)  # the variant and data taken out
  data_dir = str(overrides.pop('data_dir', cifar10_dir))
  config = helpers.tiny_config(data_dir.format(workdir=tmp_path / 'run'),
                               overrides.pop('variant', 'vit'), **overrides)
  with pytest.raises(ValueError, match=message):
    train.train_and_evaluate(config, tmp_path / 'run')
  assert not (tmp_path / 'run').exists()


def test_a_workdir_of_another_run_is_refused_not_restored(
    one_epoch_run, tmp_path):
  # A change that keeps what the checkpoints mean is allowed and recorded:
  # test_main's cpu_devices, test_config_schema's intervals.
  config, workdir, _, _ = one_epoch_run
  tmp_path = shutil.copytree(workdir, tmp_path / 'run')
  before = (tmp_path / 'config.json').read_text()
  other = helpers.tiny_config(config.data_dir, num_epochs=1, batch_size=32,
                              image_size=24)
  with pytest.raises(
      ConfigError, match=r"another config\.image_size \(32 there, 24 here\); "
      r"config\.batch_size \(16 there, 32 here\).*new "
      r'--workdir to start afresh'):
    train.train_and_evaluate(other, tmp_path)
  assert (tmp_path / 'config.json').read_text() == before
  # A finished run gathered without its checkpoints is not trained over.
  shutil.rmtree(tmp_path / 'checkpoints')
  summary = (tmp_path / 'summary.json').read_text()
  with pytest.raises(
      WorkdirError, match=r'holds the summary\.json of a '
      r'finished run but none of its checkpoints'):
    train.train_and_evaluate(config, tmp_path)
  assert (tmp_path / 'summary.json').read_text() == summary


# ------------------------------------------------- real processes ----------


def _train_in_two_processes(data_dir, workdir, tmp_path, **overrides):
  """The logs of `trained_vit_config` run in 2 processes x 1 CPU device."""
  config_file = helpers.write_process_config(tmp_path, data_dir,
                                             'trained_vit_config', **overrides)
  processes, logs = helpers.start_two_processes(config_file, workdir, tmp_path)
  for code, log in zip(helpers.wait_all(processes), logs):
    assert code == 0, log.read_text()[-3000:]
  return [log.read_text() for log in logs]


def assert_logged_as(workdir, reference):
  """`workdir`'s one record is `reference`'s: counts the same, losses close."""
  [record], expected = helpers.history(workdir), helpers.history(reference)[0]
  for metric in ('train_loss', 'test_loss'):
    assert record[metric] == pytest.approx(expected[metric], abs=1e-5)
  for metric in ('step', 'test_examples', 'train_accuracy', 'test_accuracy'):
    assert record[metric] == expected[metric]


@pytest.mark.slow  # 46 s; the default run keeps test_runtime_peer_watch's
def test_two_processes_give_the_two_device_loss_and_one_set_of_files(
    trained_vit_run, tmp_path):
  reference, data_dir = trained_vit_run
  workdir = tmp_path / 'run'
  logs = _train_in_two_processes(data_dir, workdir, tmp_path)
  assert '[process 1/2] step 6/6 (epoch 1)' in logs[1]

  assert_logged_as(workdir, reference)  # written once, by process 0
  assert json.loads((workdir / 'config.json').read_text()) == json.loads(
      (reference / 'config.json').read_text())
  assert json.loads((workdir / 'summary.json').read_text())['steps'] == 6
  assert len(list(
      (workdir / 'tensorboard' / 'training').glob('events.out.*'))) == 1
  # The checkpoint both processes wrote restores on this process's device.
  run = reading.load_run(workdir)
  assert run.step == 6
  helpers.assert_trees_close(run.params,
                             reading.load_run(reference).params, atol=1e-5)


@pytest.mark.slow  # 30 s: two processes and a reference run
def test_two_streaming_processes_each_read_their_half_of_every_batch(
    trained_vit_run, tmp_path):
  _, data_dir = trained_vit_run
  config = helpers.trained_vit_config(data_dir)
  config.input_pipeline, config.input_workers = 'streaming', 0
  train.train_and_evaluate(config, tmp_path / 'reference')
  # Threads: worker processes start in seconds.
  logs = _train_in_two_processes(data_dir, tmp_path / 'run', tmp_path,
                                 input_pipeline='streaming', input_workers=0)
  for process_id, log in enumerate(logs):
    rows = f'{8 * process_id}:{8 * (process_id + 1)}'
    assert f'reads rows {rows} of every training batch of 16' in log
  assert_logged_as(tmp_path / 'run', tmp_path / 'reference')


@pytest.mark.slow  # 30 s: two processes
def test_two_processes_save_the_same_epochs_checkpoints(cifar10_dir, tmp_path):
  """Process 0 answers orbax's per-epoch save policy for both."""
  # 6 steps an epoch
  _train_in_two_processes(cifar10_dir, tmp_path / 'run', tmp_path,
                          total_steps=18, checkpoint_every_steps=0,
                          checkpoint_min_seconds=1e9)
  assert helpers.steps_saved(tmp_path / 'run') == [6, 18]


# Ctrl-C (33 s) is sent on to jax's preemption service as SIGTERM (SIGTERM
# itself: test_faults' resumed two-process job). SIGTERM saving every step
# (30 s): where orbax's saves move jax's sync point, the job trains on.
@pytest.mark.slow
@pytest.mark.parametrize('signum, checkpoint_every', [(signal.SIGINT, 5000),
                                                      (signal.SIGTERM, 1)],
                         ids=['Ctrl-C', 'SIGTERM-saving'])
def test_a_stop_signal_to_one_of_two_processes_stops_both_at_one_saved_step(
    uninterrupted, tmp_path, signum, checkpoint_every):
  data_dir, _ = uninterrupted
  config_file = helpers.write_process_config(tmp_path, data_dir)
  workdir = tmp_path / 'run'
  # Long enough that jax's preemption notice (polled each second) arrives
  # well before the end.
  processes, logs = helpers.start_two_processes(
      config_file, workdir, tmp_path, '--config.total_steps=2000',
      f'--config.checkpoint_every_steps={checkpoint_every}',
      '--config.eval_every_steps=5000')
  helpers.wait_for_step(processes[0], workdir, 3)
  processes[1].send_signal(signum)
  assert helpers.wait_all(processes,
                          timeout=120) == [preemption.PREEMPTED_EXIT_STATUS] * 2
  stopped = [
      int(log.read_text().split('saved a checkpoint of step ')[1].split()[0])
      for log in logs
  ]
  assert stopped[0] == stopped[1] < 2000
  assert helpers.steps_saved(workdir) == ([
      stopped[0]
  ] if checkpoint_every > stopped[0] else [stopped[0] - 1, stopped[0]])
