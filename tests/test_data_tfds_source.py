"""tfds datasets on disk: array_record by index, tfrecord whole."""

import numpy as np
import pytest

from tests import helpers
from vit_jax.data import sources
from vit_jax.data import streaming
from vit_jax.data import tfds_source
from vit_jax.errors import DatasetError
from vit_jax.runtime import sharding


def _open(data_dir, name, whole=True):
  return tfds_source.open_tfds(name[len('tfds:'):], data_dir, 'train', 'test',
                               whole)


def test_tfds_dataset_prepared_on_disk(tmp_path):
  tf = pytest.importorskip('tensorflow')
  tfds = pytest.importorskip('tensorflow_datasets')
  train, test = helpers.random_cifar(12, 3, seed=6), helpers.random_cifar(
      5, 3, seed=7)
  tfds.dataset_builders.TfDataBuilder(
      name='tiny_images', version='1.0.0', data_dir=str(tmp_path),
      split_datasets={
          split: tf.data.Dataset.from_tensor_slices({
              'image': images, 'label': labels
          }) for split, (images, labels) in (('train', train), ('test', test))
      }, features=tfds.features.FeaturesDict({
          'image': tfds.features.Image(shape=(32, 32, 3)),
          'label': tfds.features.ClassLabel(num_classes=3)
      })).download_and_prepare()

  dataset = _open(tmp_path, 'tfds:tiny_images')
  assert dataset.num_classes == 3
  for split, (images, labels) in ((dataset.train, train), (dataset.test, test)):
    loaded_images, loaded_labels = sources.to_arrays(split, 32)
    order = np.argsort([img.tobytes() for img in loaded_images])
    expected = np.argsort([img.tobytes() for img in images])
    np.testing.assert_array_equal(loaded_images[order], images[expected])
    np.testing.assert_array_equal(loaded_labels[order], labels[expected])

  with pytest.raises(DatasetError, match='not prepared'):
    _open(tmp_path / 'empty', 'tfds:mnist')


def test_tfds_array_record_is_read_by_index_or_whole_without_tensorflow(
    tmp_path):
  name = helpers.prepare_tfds_array_record(
      tmp_path, 'VitJaxVariableSizeTest', 7, 4, lambda i:
      (20 + 3 * i, 30 - 2 * i, 3), names=['cat', 'dog', 'bird'])
  dataset = _open(tmp_path, name, whole=False)
  assert (len(dataset.train), len(dataset.test), dataset.num_classes,
          dataset.class_names) == (7, 4, 3, ('cat', 'dog', 'bird'))
  assert {dataset.train[i][0].shape
          for i in range(7)} == {(20 + 3 * i, 30 - 2 * i, 3) for i in range(7)}
  assert sorted(dataset.train[i][1] for i in range(7)) == [0, 0, 0, 1, 1, 2, 2]
  # Read whole for the on-device input, each image resized to image_size;
  # streamed, each cropped and resized on the host.
  assert sources.to_arrays(dataset.train, 16)[0].shape == (7, 16, 16, 3)
  config = helpers.tiny_config(tmp_path, dataset=name, batch_size=4,
                               image_size=16, input_pipeline='streaming',
                               input_workers=0)
  inputs = streaming.StreamingInput(sources.open_dataset(config), config,
                                    sharding.make_mesh())
  images, _ = next(inputs.train_batches(inputs.position(0)))
  assert images.shape == (4, 16, 16, 3)
  with pytest.raises(DatasetError, match='not prepared'):
    _open(tmp_path / 'empty', name, whole=False)
  for whole in (False, True):  # a mistyped split, whatever would read it
    with pytest.raises(
        DatasetError, match="^config.train_split='trian': "
        "Unknown split 'trian'. Should be one of"):
      tfds_source.open_tfds(name[len('tfds:'):], tmp_path, 'trian', 'test',
                            whole)
  with pytest.raises(
      DatasetError, match="no dataset 'vit_jax_none', in its "
      'catalog or prepared in .*: prepare it'):
    _open(tmp_path, 'tfds:vit_jax_none', whole=False)
  # Read whole, without tensorflow, at the images' own size.
  name = helpers.prepare_tfds_array_record(tmp_path, 'VitJaxFixedSizeTest', 4,
                                           2, lambda i: (8, 8, 3))
  dataset = _open(tmp_path, name)
  images, labels = sources.to_arrays(dataset.train, 8)
  assert (images.shape, sorted(labels.tolist()),
          dataset.num_classes) == ((4, 8, 8, 3), [0, 0, 1, 2], 3)
  assert dataset.class_names == ()  # numbered: no names to record
