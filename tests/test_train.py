"""The training loop end to end on a tiny synthetic CIFAR-10."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.conftest import study_config
from tests.conftest import tiny_config
from vit_jax import input_pipeline
from vit_jax import models
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
