"""Shared fixtures: synthetic datasets in the official on-disk formats, and
the study's config cut down to seconds."""

import importlib.util
import io
import os
import pathlib
import pickle
import subprocess
import sys

import ml_collections
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def random_cifar(num_examples: int, num_classes: int, seed: int):
  """(images NHWC uint8, labels) that every class appears in."""
  rng = np.random.default_rng(seed)
  images = rng.integers(0, 256, (num_examples, 32, 32, 3), dtype=np.uint8)
  labels = np.arange(num_examples) % num_classes
  return images, rng.permutation(labels).astype(np.int32)


def _planar(images):
  return images.transpose(0, 3, 1, 2).reshape(len(images), -1)


def write_cifar_binary(folder: pathlib.Path, files: dict, label_bytes=1):
  """files: name -> (images, labels); CIFAR-100 records carry (coarse, fine)."""
  folder.mkdir(parents=True)
  for name, (images, labels) in files.items():
    label_columns = np.stack([labels // 5, labels], 1) if label_bytes == 2 else (
        labels[:, None])
    records = np.concatenate([label_columns.astype(np.uint8), _planar(images)],
                             axis=1)
    records.tofile(folder / name)


def write_cifar_python(folder: pathlib.Path, files: dict, label_key=b'labels'):
  folder.mkdir(parents=True)
  for name, (images, labels) in files.items():
    with open(folder / name, 'wb') as f:
      pickle.dump({b'data': _planar(images), label_key: labels.tolist()}, f)


def png(image: np.ndarray) -> bytes:
  from PIL import Image  # pylint: disable=g-import-not-at-top
  buffer = io.BytesIO()
  Image.fromarray(image).save(buffer, format='PNG')
  return buffer.getvalue()


def prepare_tfds_array_record(data_dir: pathlib.Path, class_name: str,
                              num_train: int, num_test: int,
                              image_shape) -> str:
  """Prepares a 3-class tfds dataset of random images, `image_shape(i)` for
  the i-th, in the array_record format, without TensorFlow (the images go in
  as encoded PNG); returns its `config.dataset` name."""
  tfds = pytest.importorskip('tensorflow_datasets')
  static_shape = image_shape(0) if image_shape(0) == image_shape(1) else (
      None, None, 3)

  def info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=static_shape),
            'label': tfds.features.ClassLabel(num_classes=3)}))

  def split_generators(self, dl_manager):
    del dl_manager
    return {'train': self._generate_examples(num_train, 0),
            'test': self._generate_examples(num_test, 1)}

  def generate_examples(self, count, seed):
    del self
    rng = np.random.default_rng(seed)
    for i in range(count):
      image = rng.integers(0, 256, image_shape(i), np.uint8)
      yield i, {'image': io.BytesIO(png(image)), 'label': i % 3}

  builder_class = type(class_name, (tfds.core.GeneratorBasedBuilder,), {
      'VERSION': tfds.core.Version('1.0.0'),
      'code_path': None,  # no checksums file to look up beside this module
      '_info': info,
      '_split_generators': split_generators,
      '_generate_examples': generate_examples,
  })
  builder = builder_class(data_dir=str(data_dir), file_format='array_record')
  builder.download_and_prepare()
  return f'tfds:{builder.name}'


@pytest.fixture
def cifar10_binary(tmp_path):
  """A CIFAR-10 binary release with 2 x 48 training and 37 test images."""
  splits = {
      'data_batch_1.bin': random_cifar(48, 10, seed=1),
      'data_batch_2.bin': random_cifar(48, 10, seed=2),
      'test_batch.bin': random_cifar(37, 10, seed=3),
  }
  write_cifar_binary(tmp_path / 'data' / 'cifar-10-batches-bin', splits)
  return tmp_path / 'data', splits


TINY_MODELS = {
    'vit': dict(num_layers=1, hidden_size=16, num_heads=2, mlp_dim=32,
                patch_size=8),
    'simple_cnn': dict(widths=(4, 4, 8, 8, 8)),
}


def study_config(model: str = 'vit') -> ml_collections.ConfigDict:
  spec = importlib.util.spec_from_file_location(
      'cifar_small', ROOT / 'configs' / 'cifar_small.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(model)


def tiny_config(data_dir, variant='vit', **overrides):
  """The study's config, cut down to seconds: 96 train / 37 test images."""
  config = study_config(variant)
  config.model_overrides = TINY_MODELS[variant]
  config.data_dir = str(data_dir)
  config.train_examples = 0
  config.test_examples = 0
  config.batch_size = 16
  config.eval_batch_size = 16
  config.num_epochs = 2
  config.warmup_epochs = 1
  config.update(overrides)
  return config


def trained_vit_config(data_dir) -> ml_collections.ConfigDict:
  """The config `trained_vit_run` trains."""
  config = tiny_config(data_dir, num_epochs=1, image_size=24)
  config.model_overrides.num_layers = 2
  return config


_TRAIN_SCRIPT = '''
import sys
sys.path.insert(0, {root!r})
from tests.conftest import trained_vit_config
from vit_jax import train
train.train_and_evaluate(trained_vit_config({data_dir!r}), {workdir!r})
'''


@pytest.fixture(scope='session')
def trained_vit_run(tmp_path_factory):
  """(workdir, data_dir) of a 2-layer ViT trained 1 epoch at 24x24 (a 3x3
  patch grid) on 2 host devices."""
  root = tmp_path_factory.mktemp('trained_vit_run')
  data_dir = root / 'data'
  write_cifar_binary(data_dir / 'cifar-10-batches-bin', {
      'data_batch_1.bin': random_cifar(96, 10, seed=1),
      'test_batch.bin': random_cifar(37, 10, seed=3),
  })
  workdir = root / 'run'
  env = {**os.environ,
         'XLA_FLAGS': '--xla_force_host_platform_device_count=2'}
  subprocess.run(
      [sys.executable, '-c', _TRAIN_SCRIPT.format(
          root=str(ROOT), data_dir=str(data_dir), workdir=str(workdir))],
      env=env, check=True, capture_output=True)
  return workdir, data_dir


def process_test_config(data_dir) -> ml_collections.ConfigDict:
  """What the kill -9 and SIGTERM tests run: 40 steps of a small ViT (~0.1 s
  a step here) on 80 images, 5 steps an epoch, on 1 CPU device."""
  config = tiny_config(data_dir, total_steps=40, num_epochs=0,
                       log_every_steps=3, eval_every_steps=8,
                       checkpoint_every_steps=4, cpu_devices=1)
  config.model_overrides = dict(num_layers=2, hidden_size=64, num_heads=4,
                                mlp_dim=128, patch_size=4)
  return config
