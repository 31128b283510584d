"""Datasets from disk, subsets, batching and on-device augmentation."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from tests.conftest import prepare_tfds_array_record
from tests.conftest import random_cifar
from tests.conftest import write_cifar_binary
from tests.conftest import write_cifar_python
from vit_jax import input_pipeline


def _config(data_dir, dataset='cifar10', **overrides):
  fields = dict(dataset=dataset, data_dir=str(data_dir), train_examples=0,
                test_examples=0, image_size=32, train_split='train',
                test_split='test')
  return ml_collections.ConfigDict({**fields, **overrides})


def _assert_same(a, b):
  np.testing.assert_array_equal(a.images, b.images)
  np.testing.assert_array_equal(a.labels, b.labels)


def test_both_cifar10_formats_load_to_the_same_arrays(cifar10_binary,
                                                      tmp_path):
  data_dir, splits = cifar10_binary
  write_cifar_python(tmp_path / 'py' / 'cifar-10-batches-py', {
      'data_batch_1': splits['data_batch_1.bin'],
      'data_batch_2': splits['data_batch_2.bin'],
      'test_batch': splits['test_batch.bin'],
  })
  binary = input_pipeline.load_dataset(_config(data_dir))
  python = input_pipeline.load_dataset(_config(tmp_path / 'py'))
  _assert_same(binary.train, python.train)
  _assert_same(binary.test, python.test)
  assert binary.num_classes == python.num_classes == 10

  # Pixels land where the official planar layout puts them.
  expected_train = np.concatenate([splits['data_batch_1.bin'][0],
                                   splits['data_batch_2.bin'][0]])
  np.testing.assert_array_equal(binary.train.images, expected_train)
  np.testing.assert_array_equal(binary.test.labels,
                                splits['test_batch.bin'][1])
  assert binary.train.images.dtype == np.uint8
  assert binary.train.labels.dtype == np.int32


def test_both_cifar100_formats_load_fine_labels(tmp_path):
  train, test = random_cifar(20, 100, seed=4), random_cifar(10, 100, seed=5)
  write_cifar_binary(tmp_path / 'bin' / 'cifar-100-binary',
                     {'train.bin': train, 'test.bin': test}, label_bytes=2)
  write_cifar_python(tmp_path / 'py' / 'cifar-100-python',
                     {'train': train, 'test': test}, label_key=b'fine_labels')
  binary = input_pipeline.load_dataset(_config(tmp_path / 'bin', 'cifar100'))
  python = input_pipeline.load_dataset(_config(tmp_path / 'py', 'cifar100'))
  for loaded in (binary, python):
    np.testing.assert_array_equal(loaded.train.images, train[0])
    np.testing.assert_array_equal(loaded.train.labels, train[1])
    np.testing.assert_array_equal(loaded.test.labels, test[1])
    assert loaded.num_classes == 100


def test_data_dir_from_environment(cifar10_binary, monkeypatch):
  data_dir, _ = cifar10_binary
  monkeypatch.setenv(input_pipeline.DATA_DIR_ENV, str(data_dir))
  assert len(input_pipeline.load_dataset(_config('')).train) == 96


def test_deterministic_subset_is_the_first_examples(cifar10_binary):
  data_dir, _ = cifar10_binary
  full = input_pipeline.load_dataset(_config(data_dir))
  subset = input_pipeline.load_dataset(
      _config(data_dir, train_examples=50, test_examples=7))
  np.testing.assert_array_equal(subset.train.images, full.train.images[:50])
  np.testing.assert_array_equal(subset.test.labels, full.test.labels[:7])
  with pytest.raises(input_pipeline.DatasetError,
                     match='train_examples=500 but the dataset has only 96'):
    input_pipeline.load_dataset(_config(data_dir, train_examples=500))


def test_image_folder(tmp_path):
  from PIL import Image
  rng = np.random.default_rng(0)
  written = {}
  for split, count in (('train', 3), ('test', 2)):
    for label, name in enumerate(['cat', 'dog']):
      (tmp_path / split / name).mkdir(parents=True)
      for i in range(count):
        image = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        Image.fromarray(image).save(tmp_path / split / name / f'{i}.png')
        written.setdefault(split, []).append((image, label))
  dataset = input_pipeline.load_dataset(
      _config(tmp_path, 'image_folder', image_size=8))
  assert dataset.num_classes == 2
  for split in ('train', 'test'):
    loaded = getattr(dataset, split)
    np.testing.assert_array_equal(loaded.images,
                                  np.stack([i for i, _ in written[split]]))
    np.testing.assert_array_equal(loaded.labels, [l for _, l in written[split]])


def test_missing_data_says_where_it_looked_and_what_to_do(tmp_path):
  with pytest.raises(input_pipeline.DatasetError,
                     match=r'No cifar10 found in .*cifar-10-batches-bin.*'
                     r'--config.data_dir=DIR or set \$VIT_JAX_DATA_DIR'):
    input_pipeline.load_dataset(_config(tmp_path))
  with pytest.raises(input_pipeline.DatasetError, match='does not exist'):
    input_pipeline.load_dataset(_config(tmp_path / 'nowhere'))
  with pytest.raises(input_pipeline.DatasetError, match='pass --config.data_dir'):
    input_pipeline.load_dataset(_config(''))
  with pytest.raises(input_pipeline.DatasetError, match="Unknown dataset 'mnist'"):
    input_pipeline.load_dataset(_config(tmp_path, 'mnist'))


def test_malformed_data_names_the_file(cifar10_binary):
  data_dir, _ = cifar10_binary
  broken = data_dir / 'cifar-10-batches-bin' / 'test_batch.bin'
  broken.write_bytes(broken.read_bytes()[:-5])
  with pytest.raises(input_pipeline.DatasetError,
                     match='test_batch.bin is not a CIFAR binary file'):
    input_pipeline.load_dataset(_config(data_dir))


def test_tfds_without_tensorflow_says_how_to_install(tmp_path):
  try:
    import tensorflow  # pylint: disable=unused-import
    pytest.skip('TensorFlow is installed')
  except ImportError:
    pass
  name = prepare_tfds_array_record(tmp_path, 'VitJaxFixedSizeTest', 4, 2,
                                   lambda i: (8, 8, 3))
  with pytest.raises(input_pipeline.DatasetError,
                     match=r"pip install -e '\.\[tf\]'.*streaming"):
    input_pipeline.load_dataset(_config(tmp_path, name))


def test_epoch_batches_shuffle_per_epoch_and_are_reproducible():
  first = input_pipeline.epoch_batches(0, 1, 100, 16)
  assert first.shape == (6, 16)
  assert len(np.unique(first)) == 96
  np.testing.assert_array_equal(first, input_pipeline.epoch_batches(0, 1, 100,
                                                                    16))
  assert not np.array_equal(first, input_pipeline.epoch_batches(0, 2, 100, 16))


@pytest.mark.parametrize('num_examples,batch_size', [(37, 16), (32, 16), (5, 8)])
def test_eval_batches_cover_every_example_exactly_once(num_examples,
                                                       batch_size):
  indices, mask = input_pipeline.eval_batches(num_examples, batch_size)
  assert indices.shape == mask.shape
  assert indices.shape[1] == batch_size
  assert sorted(indices[mask == 1].tolist()) == list(range(num_examples))


def test_random_crop_and_flip_is_a_shifted_crop_of_the_padded_image():
  images = jax.random.uniform(jax.random.key(0), (16, 6, 6, 3))
  out = np.asarray(
      input_pipeline.random_crop_and_flip(jax.random.key(1), images, 2))
  padded = np.pad(np.asarray(images), ((0, 0), (2, 2), (2, 2), (0, 0)))
  seen = set()
  for image, source in zip(out, padded):
    matches = [(dy, dx, flip) for dy in range(5) for dx in range(5)
               for flip in (False, True)
               if np.array_equal(image, (lambda c: c[:, ::-1] if flip else c)(
                   source[dy:dy + 6, dx:dx + 6]))]
    assert matches
    seen.update(m[2] for m in matches)
  assert seen == {False, True}


def test_preprocess_normalises_and_resizes():
  images = jnp.full((2, 4, 4, 3), 255, jnp.uint8)
  out = input_pipeline.preprocess(images, key=None, augment=False,
                                  image_size=8, mean=(0.5, 0.5, 0.5),
                                  std=(0.25, 0.5, 1.0))
  assert out.shape == (2, 8, 8, 3)
  np.testing.assert_allclose(out[0, 0, 0], [2.0, 1.0, 0.5], rtol=1e-6)


def test_tfds_dataset_prepared_on_disk(tmp_path):
  tf = pytest.importorskip('tensorflow')
  tfds = pytest.importorskip('tensorflow_datasets')
  train, test = random_cifar(12, 3, seed=6), random_cifar(5, 3, seed=7)
  builder = tfds.dataset_builders.TfDataBuilder(
      name='tiny_images', version='1.0.0', data_dir=str(tmp_path),
      split_datasets={
          split: tf.data.Dataset.from_tensor_slices(
              {'image': images, 'label': labels})
          for split, (images, labels) in (('train', train), ('test', test))},
      features=tfds.features.FeaturesDict({
          'image': tfds.features.Image(shape=(32, 32, 3)),
          'label': tfds.features.ClassLabel(num_classes=3)}))
  builder.download_and_prepare()

  dataset = input_pipeline.load_dataset(_config(tmp_path, 'tfds:tiny_images'))
  assert dataset.num_classes == 3
  for loaded, (images, labels) in ((dataset.train, train),
                                   (dataset.test, test)):
    order = np.argsort([img.tobytes() for img in loaded.images])
    expected = np.argsort([img.tobytes() for img in images])
    np.testing.assert_array_equal(loaded.images[order], images[expected])
    np.testing.assert_array_equal(loaded.labels[order], labels[expected])

  with pytest.raises(input_pipeline.DatasetError, match='not prepared'):
    input_pipeline.load_dataset(_config(tmp_path / 'empty', 'tfds:mnist'))
