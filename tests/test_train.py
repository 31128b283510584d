"""The training loop end to end on a tiny synthetic CIFAR-10."""

import functools
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.conftest import trained_vit_config
from tests.conftest import tiny_config
from vit_jax import checkpoint
from vit_jax import input_pipeline
from vit_jax import train

ROOT = pathlib.Path(__file__).resolve().parents[1]


def history(workdir):
  lines = (pathlib.Path(workdir) / 'metrics.jsonl').read_text().splitlines()
  return [json.loads(line) for line in lines]


def without_timings(records):
  timings = ('images_per_second', 'epoch_seconds')
  return [{k: v for k, v in r.items() if k not in timings} for r in records]


def final_state(workdir, epoch):
  with ocp.CheckpointManager(pathlib.Path(workdir) / 'checkpoints') as manager:
    restored = manager.restore(
        epoch, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
  return restored.state


@pytest.mark.parametrize('model', ['vit', 'simple_cnn'])
def test_interrupted_then_resumed_equals_uninterrupted(cifar10_binary,
                                                       tmp_path, model):
  data_dir, _ = cifar10_binary
  config = tiny_config(data_dir, model)
  summary = train.train_and_evaluate(config, tmp_path / 'whole')
  assert summary['epochs'] == 2
  for name in ('config.json', 'metrics.jsonl', 'summary.json'):
    assert (tmp_path / 'whole' / name).is_file()
  assert list((tmp_path / 'whole' / 'tensorboard').glob('events.out.*'))

  # Killed after epoch 1's checkpoint: its epoch-2 checkpoint never happened.
  shutil.copytree(tmp_path / 'whole', tmp_path / 'resumed')
  shutil.rmtree(tmp_path / 'resumed' / 'checkpoints' / '2')
  resumed = train.train_and_evaluate(config, tmp_path / 'resumed')

  assert without_timings(history(tmp_path / 'resumed')) == without_timings(
      history(tmp_path / 'whole'))
  assert resumed['best_test_accuracy'] == summary['best_test_accuracy']
  jax.tree.map(np.testing.assert_array_equal,
               final_state(tmp_path / 'resumed', 2),
               final_state(tmp_path / 'whole', 2))


def test_rerunning_a_finished_run_does_not_train_again(cifar10_binary,
                                                       tmp_path):
  data_dir, _ = cifar10_binary
  config = tiny_config(data_dir, num_epochs=1)
  first = train.train_and_evaluate(config, tmp_path)
  before = history(tmp_path)
  again = train.train_and_evaluate(config, tmp_path)
  assert history(tmp_path) == before
  assert again == first


def test_eval_scores_every_test_example_once(cifar10_binary, tmp_path):
  data_dir, splits = cifar10_binary
  config = tiny_config(data_dir, num_epochs=1)  # 37 test images, batches of 16
  train.train_and_evaluate(config, tmp_path)
  record = history(tmp_path)[-1]
  assert record['test_examples'] == 37

  images, labels = splits['test_batch.bin']
  model = train.create_model(config, 10)
  params = final_state(tmp_path, 1)['params']
  logits = model.apply({'params': params},
                       input_pipeline.preprocess(
                           images, key=None, augment=False, image_size=32,
                           mean=config.pixel_mean, std=config.pixel_std),
                       train=False)
  accuracy = float(np.mean(np.argmax(logits, -1) == labels))
  assert record['test_accuracy'] == pytest.approx(accuracy, abs=1e-6)


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(cifar10_binary,
                                                           tmp_path):
  data_dir, _ = cifar10_binary
  train.train_and_evaluate(tiny_config(data_dir, num_epochs=1), tmp_path)
  # Zero std turns every input into inf/nan from epoch 2 on.
  broken = tiny_config(data_dir, num_epochs=2, pixel_std=(0.0, 0.0, 0.0))
  with pytest.raises(train.TrainingDivergedError,
                     match='loss became nan in epoch 2.*checkpoint'):
    train.train_and_evaluate(broken, tmp_path)
  with ocp.CheckpointManager(tmp_path / 'checkpoints') as manager:
    assert manager.all_steps() == [1]
  assert [r['epoch'] for r in history(tmp_path)] == [1]
  assert np.isfinite(final_state(tmp_path, 1)['params']['head']['bias']).all()


_LOSS_SCRIPT = '''
import json, sys
import jax
sys.path.insert(0, {root!r})
from tests.conftest import tiny_config
from vit_jax import train
config = tiny_config({data_dir!r}, num_epochs=1, batch_size=16)
train.train_and_evaluate(config, {workdir!r})
print(json.dumps([jax.device_count(), {workdir!r}]))
'''


def test_eight_devices_give_the_single_device_loss(cifar10_binary, tmp_path):
  data_dir, _ = cifar10_binary
  records = {}
  for devices in (1, 8):
    workdir = str(tmp_path / f'devices_{devices}')
    env = {**os.environ,
           'XLA_FLAGS': f'--xla_force_host_platform_device_count={devices}'}
    out = subprocess.run(
        [sys.executable, '-c', _LOSS_SCRIPT.format(
            root=str(ROOT), data_dir=str(data_dir), workdir=workdir)],
        env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1])[0] == devices
    records[devices] = history(workdir)[-1]
  for metric in ('train_loss', 'test_loss'):
    assert records[8][metric] == pytest.approx(records[1][metric], abs=1e-5)


@pytest.mark.parametrize('overrides,message', [
    (dict(learning_rate=0.0), 'learning_rate=0.0 must be positive'),
    (dict(num_epochs=-1), 'num_epochs=-1 must be positive'),
    (dict(optimizer='lamb'), "optimizer='lamb'"),
    (dict(dtype='float16'), "dtype='float16'"),
    (dict(model='ViT-Q_3'), "Unknown model 'ViT-Q_3'"),
    (dict(dataset='imagenet'), "Unknown dataset 'imagenet'"),
    (dict(image_size=30), 'image_size=30 is not divisible by the patch size 8'),
    (dict(batch_size=512), 'batch_size=512 is larger than the 96 training'),
    (dict(model_overrides={'depth': 2}), 'no field.*depth'),
    (dict(lr_decay='step'), "lr_decay='step'"),
    (dict(input_pipeline='tf.data'), "input_pipeline='tf.data'"),
    (dict(cpu_compiler_options={'xla_cpu_no_such_option': '1'}),
     "No such compile option: 'xla_cpu_no_such_option'"),

])
def test_bad_input_is_a_clear_error_before_compiling(cifar10_binary, tmp_path,
                                                     overrides, message):
  data_dir, _ = cifar10_binary
  config = tiny_config(data_dir, **overrides)
  with pytest.raises(ValueError, match=message):
    train.train_and_evaluate(config, tmp_path)
  assert not (tmp_path / 'checkpoints').exists()


def test_batch_not_divisible_by_device_count_is_a_clear_error(tmp_path):
  config = tiny_config(tmp_path, batch_size=12)
  with pytest.raises(train.ConfigError,
                     match='batch_size=12 is not divisible by the 8 devices'):
    train.validate_config(config, num_devices=8)


def test_learning_rate_warms_up_then_decays_to_zero():
  config = tiny_config('', num_epochs=10, warmup_epochs=2)
  schedule = train.create_learning_rate_schedule(config, steps_per_epoch=5)
  lrs = [float(schedule(step)) for step in range(51)]
  assert lrs[0] == 0.0
  assert lrs[10] == pytest.approx(config.learning_rate)
  assert all(a < b for a, b in zip(lrs[:10], lrs[1:11]))
  assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
  assert lrs[50] == pytest.approx(0.0, abs=1e-12)


def test_linear_decay_after_a_warmup_counted_in_steps():
  config = tiny_config('', num_epochs=10, warmup_epochs=2, warmup_steps=4,
                       lr_decay='linear')
  schedule = train.create_learning_rate_schedule(config, steps_per_epoch=5)
  peak = config.learning_rate
  np.testing.assert_allclose(
      [float(schedule(step)) for step in (0, 2, 4, 27, 50)],
      [0.0, peak / 2, peak, peak / 2, 0.0], rtol=1e-6, atol=1e-12)


def _one_device_train_step(config):
  """(jitted train step, initial state) of `config` on one device, seed 0."""
  mesh = jax.make_mesh((1,), ('data',),
                       axis_types=(jax.sharding.AxisType.Auto,))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  batch = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec('data'))
  model = train.create_model(config, num_classes=10)
  tx = train.create_optimizer(config, lambda step: 1e-3)
  state = train.create_train_state(jax.random.key(0), model, tx, 32,
                                   replicated)
  step = jax.jit(functools.partial(train.train_step, config=config,
                                   batch_sharding=batch))
  return step, state


def _random_batch(size):
  rng = np.random.default_rng(0)
  return (rng.integers(0, 256, (size, 32, 32, 3), dtype=np.uint8),
          rng.integers(0, 10, (size,), dtype=np.int32))


def test_gradient_accumulation_gives_the_same_step():
  # One step on 16 images, whole or as 4 micro-batches of 4.
  images, labels = _random_batch(16)
  results = {}
  for steps in (1, 4):
    config = tiny_config('', augment=False, grad_accumulation_steps=steps)
    config.model_overrides.dropout_rate = 0.0
    step, state = _one_device_train_step(config)
    results[steps] = step(state, (images, labels), np.arange(16),
                          jax.random.key(1))
  (state_1, metrics_1), (state_4, metrics_4) = results[1], results[4]
  for name in ('loss', 'correct', 'count'):
    np.testing.assert_allclose(metrics_4[name], metrics_1[name], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(state_1.params),
                  jax.tree.leaves(state_4.params)):
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_accumulation_must_split_the_batch_over_the_devices(tmp_path):
  config = tiny_config(tmp_path, batch_size=16, grad_accumulation_steps=3)
  with pytest.raises(train.ConfigError, match='grad_accumulation_steps=3'):
    train.validate_config(config, num_devices=1)


_PROCESS_CONFIG = '''
import sys
sys.path.insert(0, {root!r})
from tests.conftest import trained_vit_config
def get_config():
  config = trained_vit_config({data_dir!r})
  config.input_pipeline = {input_pipeline!r}
  return config
'''


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _train_in_two_processes(data_dir, input_pipeline_name, workdir, tmp_path):
  """Runs `trained_vit_config` in 2 processes x 1 CPU device through
  main.py's cluster flags; returns their log files."""
  config_file = tmp_path / 'config.py'
  config_file.write_text(_PROCESS_CONFIG.format(
      root=str(ROOT), data_dir=str(data_dir),
      input_pipeline=input_pipeline_name))
  address = f'127.0.0.1:{_free_port()}'
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu',
         'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}
  processes, logs = [], []
  try:
    for process_id in range(2):
      logs.append(tmp_path / f'process_{process_id}.log')
      with logs[-1].open('w') as log:
        processes.append(subprocess.Popen(
            [sys.executable, '-m', 'vit_jax.main', f'--config={config_file}',
             f'--workdir={workdir}', f'--coordinator_address={address}',
             '--num_processes=2', f'--process_id={process_id}'],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    for process in processes:
      process.wait(timeout=300)
  finally:
    for process in processes:
      if process.poll() is None:
        process.kill()
        process.wait()
  for process, log in zip(processes, logs):
    assert process.returncode == 0, log.read_text()[-3000:]
  return [log.read_text() for log in logs]


def test_two_processes_give_the_two_device_loss_and_one_set_of_files(
    trained_vit_run, tmp_path):
  """2 processes x 1 CPU device (gloo collectives) train as 1 process x 2
  devices does (`trained_vit_run`), through main.py's cluster flags; both
  share the workdir, where one set of files and one checkpoint appear."""
  reference, data_dir = trained_vit_run
  workdir = tmp_path / 'run'
  logs = _train_in_two_processes(data_dir, 'on_device', workdir, tmp_path)
  assert '[process 1/2] epoch 1/1' in logs[1]

  records, expected = history(workdir), history(reference)
  assert len(records) == 1  # written once, by process 0
  for metric in ('train_loss', 'test_loss'):
    assert records[0][metric] == pytest.approx(expected[0][metric], abs=1e-5)
  for metric in ('step', 'test_examples', 'train_accuracy', 'test_accuracy'):
    assert records[0][metric] == expected[0][metric]
  assert json.loads((workdir / 'config.json').read_text()) == json.loads(
      (reference / 'config.json').read_text())
  assert json.loads((workdir / 'summary.json').read_text())['epochs'] == 1
  assert len(list((workdir / 'tensorboard').glob('events.out.*'))) == 1
  # The checkpoint both processes wrote restores on this process's device.
  run = checkpoint.load_run(workdir)
  assert run.epoch == 1
  for a, b in zip(jax.tree.leaves(run.params),
                  jax.tree.leaves(checkpoint.load_run(reference).params)):
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_two_streaming_processes_each_read_their_half_of_every_batch(
    trained_vit_run, tmp_path):
  """Streaming: each of 2 processes reads only its device's 8 rows of every
  16-image batch, and together they train as 1 process does."""
  _, data_dir = trained_vit_run
  config = trained_vit_config(data_dir)
  config.input_pipeline = 'streaming'
  train.train_and_evaluate(config, tmp_path / 'reference')
  logs = _train_in_two_processes(data_dir, 'streaming', tmp_path / 'run',
                                 tmp_path)
  for process_id, log in enumerate(logs):
    rows = f'{8 * process_id}:{8 * (process_id + 1)}'
    assert f'reads rows {rows} of every training batch of 16' in log
  records, expected = history(tmp_path / 'run'), history(
      tmp_path / 'reference')
  for metric in ('train_loss', 'test_loss'):
    assert records[0][metric] == pytest.approx(expected[0][metric], abs=1e-5)
  for metric in ('train_accuracy', 'test_accuracy', 'test_examples'):
    assert records[0][metric] == expected[0][metric]


def test_bfloat16_training_stays_close_to_float32():
  # Three train steps of the tiny ViT from the same start, on the same batches.
  images, labels = _random_batch(48)
  losses = {}
  for dtype in ('float32', 'bfloat16'):
    step, state = _one_device_train_step(tiny_config('', dtype=dtype))
    losses[dtype] = []
    for i in range(3):
      state, metrics = step(state, (images, labels),
                            np.arange(16 * i, 16 * (i + 1)), jax.random.key(1))
      losses[dtype].append(float(metrics['loss'] / metrics['count']))
    # Parameters and optimizer state stay float32.
    assert {leaf.dtype for leaf in jax.tree.leaves(state.params)} == {
        np.dtype('float32')}
    assert {leaf.dtype for leaf in jax.tree.leaves(state.opt_state)
            if leaf.ndim} == {np.dtype('float32')}
  np.testing.assert_allclose(losses['bfloat16'], losses['float32'], rtol=0.02)
