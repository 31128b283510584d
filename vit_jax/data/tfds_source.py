"""Prepared tensorflow-datasets image classification datasets ('tfds:NAME')."""

import dataclasses
import pathlib

import numpy as np

from vit_jax.data.dataset import ArraySource
from vit_jax.data.dataset import Dataset
from vit_jax.errors import DatasetError


@dataclasses.dataclass(frozen=True)
class TfdsSource:
  """A split of an array_record dataset, read by index, as RGB."""
  examples: object  # a tfds data source: len() and [i] -> feature dict

  def __len__(self):
    return len(self.examples)

  def __getitem__(self, index):
    example = self.examples[int(index)]
    image = np.asarray(example['image'], np.uint8)
    if image.ndim == 2 or image.shape[-1] == 1:  # grayscale datasets
      image = np.repeat(image.reshape(*image.shape[:2], 1), 3, axis=-1)
    return image, int(example['label'])


def _tfds_builder(name: str, data_dir: pathlib.Path | None):
  """The builder of a prepared dataset; never downloads."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  try:
    builder = tfds.builder(name, data_dir=data_dir and str(data_dir))
  except tfds.core.registered.DatasetNotFoundError as e:
    raise DatasetError(
        f'tensorflow-datasets has no dataset {name!r}, in its catalog or '
        f'prepared in {data_dir or "its data_dir"}: prepare it (tfds build, or '
        'the builder of a dataset outside the catalog) and pass '
        '--config.data_dir=DIR where it is.') from e
  if not builder.is_prepared():
    raise DatasetError(f'tfds:{name} is not prepared in {builder.data_dir}; '
                       'this job does not download. Prepare it where there is '
                       f'network (tfds build {name} --file_format=array_record '
                       '--data_dir=DIR) and pass --config.data_dir=DIR.')
  features = builder.info.features
  if 'image' not in features or 'label' not in features:
    raise DatasetError(f'tfds:{name} has features {list(features)}; image '
                       "classification needs 'image' and 'label'.")
  return builder


def _classes(builder) -> dict:
  """The number of classes, and their names where the dataset gives them."""
  label = builder.info.features['label']
  numbered = label.names == [str(i) for i in range(label.num_classes)]
  return dict(num_classes=label.num_classes,
              class_names=() if numbered else tuple(label.names))


def _convert(builder) -> str:
  return (f'tfds convert_format --root_data_dir={builder.data_dir} '
          '--out_file_format=array_record')


def _read_whole(builder, name: str, train_split: str,
                test_split: str) -> Dataset:
  """A tfrecord-format dataset of same-size images, read with TensorFlow."""
  if None in builder.info.features['image'].shape[:2]:
    raise DatasetError(
        f'tfds:{name} has images of varying size, which cannot be read whole '
        'from the tfrecord format: convert it to array_record '
        f"({_convert(builder)}) or set config.input_pipeline='streaming'.")
  try:
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    raise DatasetError(
        f'tfds:{name} is in the tfrecord format, which only TensorFlow reads: '
        "pip install -e '.[tf]', or convert it to array_record "
        f'({_convert(builder)}), which is read without it.') from e
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  def read_split(split: str) -> ArraySource:
    data = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1))
    return ArraySource(np.asarray(data['image'], np.uint8),
                       np.asarray(data['label'], np.int32))

  return Dataset(read_split(train_split), read_split(test_split),
                 **_classes(builder))


def open_tfds(name: str, data_dir: pathlib.Path | None, train_split: str,
              test_split: str, whole: bool) -> Dataset:
  """By index; failing that, and if `whole`, whole with TensorFlow."""
  builder = _tfds_builder(name, data_dir)
  for field, split in (('train_split', train_split), ('test_split',
                                                      test_split)):
    try:
      builder.info.splits[split]  # its name and slice, whatever the format
    except (KeyError, ValueError) as e:
      raise DatasetError(f'config.{field}={split!r}: {str(e).splitlines()[0]} '
                         f'(tfds:{name}).') from e
  try:
    train, test = (builder.as_data_source(split=s)
                   for s in (train_split, test_split))
  except (NotImplementedError, ValueError) as e:
    if whole:
      return _read_whole(builder, name, train_split, test_split)
    raise DatasetError(f'tfds:{name} in {builder.data_dir} cannot be read by '
                       f'index ({e}). Streaming reads the array_record format: '
                       f'convert the prepared dataset ({_convert(builder)}) or '
                       'rebuild it with --file_format=array_record.') from e
  return Dataset(TfdsSource(train), TfdsSource(test), **_classes(builder))
