"""The official CIFAR releases, fetched once into a cache and checked."""

import dataclasses
import fcntl
import hashlib
import os
import pathlib
import sys
import tarfile
import tempfile
import time
import urllib.request

from absl import logging

from vit_jax.errors import DatasetError
from vit_jax.runtime import files

# Where a config without data_dir finds (and downloads) its datasets.
DATA_DIR_ENV = 'VIT_JAX_DATA_DIR'


@dataclasses.dataclass(frozen=True)
class Release:
  url: str
  size: int
  sha256: str
  folder: str  # the directory the archive unpacks to


RELEASES = dict(
    cifar10=Release(
        'https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz', 170052171,
        'c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd',
        'cifar-10-batches-bin'),
    cifar100=Release(
        'https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz', 168513733,
        '58a81ae192c23a4be8b1804d68e518ed807d710a4eb253b1f2a199162a40d8ec',
        'cifar-100-binary'))


def cache_dir() -> pathlib.Path:
  """$VIT_JAX_DATA_DIR, else ~/.cache/vit_jax."""
  return pathlib.Path(os.environ.get(DATA_DIR_ENV) or
                      '~/.cache/vit_jax').expanduser()


def fetch(name: str, cache: pathlib.Path) -> pathlib.Path:
  """`cache/<folder>` of release `name`, downloaded unless it is there."""
  release = RELEASES[name]
  if (target := cache / release.folder).is_dir():
    return target
  try:
    cache.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise DatasetError(f'Cannot create the data cache {cache} '
                       f'({e.strerror}); set ${DATA_DIR_ENV} to a directory '
                       'you can write.') from e
  partial = files.partial_path(cache / release.url.rsplit('/', 1)[-1])
  directory = os.open(cache, os.O_RDONLY)
  try:
    # One run downloads; runs started with it wait, then find it there.
    fcntl.flock(directory, fcntl.LOCK_EX)
    if target.is_dir():
      return target
    _download(release, partial)
    with tempfile.TemporaryDirectory(dir=cache) as unpacked:
      _unpack(partial, pathlib.Path(unpacked), release.folder)
      os.replace(pathlib.Path(unpacked) / release.folder, target)
  finally:
    partial.unlink(missing_ok=True)
    os.close(directory)  # which lets the others go on
  logging.info('%s is in %s.', name, target)
  return target


def _download(release: Release, path: pathlib.Path):
  logging.info('Downloading %s (%d MB) to %s.', release.url,
               release.size // 10**6, path.parent)
  digest, received = hashlib.sha256(), 0
  start = shown = time.monotonic()
  try:
    with urllib.request.urlopen(release.url, timeout=60) as response, \
        path.open('wb') as out:
      while chunk := response.read(1 << 20):
        out.write(chunk)
        digest.update(chunk)
        received += len(chunk)
        if (now := time.monotonic()) - shown >= 0.5:  # redrawn twice a second
          shown = now
          print(
              f'\r  {100 * received / release.size:5.1f}% of '
              f'{release.size / 10**6:.0f} MB, '
              f'{received / 10**6 / (now - start):.1f} MB/s', end='',
              file=sys.stderr, flush=True)
      print(file=sys.stderr)
  except OSError as e:  # urllib's URLError too
    reason = getattr(e, 'reason', None) or e
    raise DatasetError(f'Could not download {release.url} ({reason}). '
                       'Without internet, download it elsewhere and unpack it '
                       f'into {path.parent} (it holds {release.folder}/), or '
                       'pass --config.data_dir=DIR of an unpacked copy.') from e
  if received != release.size or digest.hexdigest() != release.sha256:
    raise DatasetError(
        f'The download of {release.url} is damaged ({received} bytes, sha256 '
        f'{digest.hexdigest()[:12]}..., expected {release.size} bytes, '
        f'{release.sha256[:12]}...); it was deleted. Run again to retry.')


def _unpack(archive: pathlib.Path, into: pathlib.Path, folder: str):
  """Only files and directories under `folder`, so nothing lands elsewhere."""
  with tarfile.open(archive) as tar:
    members = [
        m for m in tar.getmembers()
        if (m.isfile() or m.isdir()) and pathlib.PurePosixPath(m.name).parts[:1]
        == (folder,) and '..' not in pathlib.PurePosixPath(m.name).parts
    ]
    if not any(m.isfile() for m in members):
      raise DatasetError(f'{archive} holds no {folder}/.')
    safe = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}
    for member in members:
      tar.extract(member, into, set_attrs=False, **safe)
