"""The CIFAR download from a local HTTP server: verified, atomic."""

import hashlib
import http.server
import io
import tarfile
import threading
import time

import numpy as np
import pytest

from tests import helpers
from vit_jax.data import download
from vit_jax.data import sources
from vit_jax.errors import DatasetError


@pytest.fixture
def server(tmp_path, monkeypatch):
  """Serves 5 x 4 training, 3 test images as cifar10; returns what it served."""
  release = helpers.cifar10_release(tmp_path / 'release', 20,
                                    3) / 'cifar-10-batches-bin'
  (release / 'batches.meta.txt').write_text('airplane\n')
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode='w:gz') as tar:
    tar.add(release, arcname='cifar-10-batches-bin')
  archive = buffer.getvalue()
  served, settings = [], {'cut': False, 'pause': 0}
  port = helpers.free_port()

  class Handler(http.server.BaseHTTPRequestHandler):

    def do_GET(self):  # pylint: disable=invalid-name
      served.append(self.path)
      self.send_response(200)
      self.send_header('Content-Length', str(len(archive)))
      self.end_headers()
      # `cut`: the connection drops halfway, as a flaky network does.
      sent = archive[:len(archive) // 2 if settings['cut'] else None]
      self.wfile.write(sent[:len(sent) // 2])
      time.sleep(settings['pause'])
      self.wfile.write(sent[len(sent) // 2:])

    log_message = lambda self, *args: None

  httpd = http.server.ThreadingHTTPServer(('127.0.0.1', port), Handler)
  threading.Thread(target=httpd.serve_forever, daemon=True).start()
  monkeypatch.setitem(
      download.RELEASES, 'cifar10',
      download.Release(f'http://127.0.0.1:{port}/cifar-10-binary.tar.gz',
                       len(archive),
                       hashlib.sha256(archive).hexdigest(),
                       'cifar-10-batches-bin'))
  monkeypatch.setenv('VIT_JAX_DATA_DIR', str(tmp_path / 'cache'))
  yield served, settings
  httpd.shutdown()


def _open(**overrides):
  return sources.open_dataset(
      helpers.schema_config(dataset='cifar10', data_dir='', **overrides))


def test_with_no_data_given_the_release_is_downloaded_once(server, tmp_path):
  served, _ = server
  dataset = _open(train_examples_per_file=2)
  assert served == ['/cifar-10-binary.tar.gz']
  assert len(dataset.train) == 10 and len(dataset.test) == 3
  cache = tmp_path / 'cache'
  assert sorted(p.name for p in cache.iterdir()) == ['cifar-10-batches-bin']
  # data_batch_2 holds 4 to 7.
  _, expected = helpers.random_cifar(20, 10, seed=1)
  np.testing.assert_array_equal(dataset.train.labels[2:4], expected[4:6])
  _open()  # found in the cache: not downloaded again
  assert len(served) == 1


def test_two_runs_downloading_at_once_both_get_the_release(server, tmp_path):
  served, settings = server
  settings['pause'] = 0.5  # both downloads under way at once
  fetched = []
  threads = [
      threading.Thread(target=lambda: fetched.append(
          download.fetch('cifar10', tmp_path / 'cache'))) for _ in range(2)
  ]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert fetched == [tmp_path / 'cache' / 'cifar-10-batches-bin'] * 2
  # Downloaded once: the second run waited for the first.
  assert len(served) == 1 and [p.name for p in (tmp_path / 'cache').iterdir()
                              ] == ['cifar-10-batches-bin']


def test_an_interrupted_damaged_or_offline_download_leaves_nothing(
    server, tmp_path, monkeypatch):
  served, settings = server
  settings['cut'] = True
  with pytest.raises(DatasetError, match='Could not download|is damaged'):
    _open()
  assert list((tmp_path / 'cache').iterdir()) == []
  settings['cut'] = False
  release = download.RELEASES['cifar10']
  monkeypatch.setitem(
      download.RELEASES, 'cifar10',
      download.Release(release.url, release.size, '0' * 64, release.folder))
  with pytest.raises(DatasetError, match=r'is damaged .*it was deleted'):
    _open()
  assert list((tmp_path / 'cache').iterdir()) == []
  url = f'http://127.0.0.1:{helpers.free_port()}/cifar-10-binary.tar.gz'  # nobody
  monkeypatch.setitem(download.RELEASES, 'cifar10',
                      download.Release(url, 1, '0' * 64, release.folder))
  with pytest.raises(DatasetError) as offline:
    _open()
  assert str(offline.value).startswith(f'Could not download {url} (')
  assert (f'unpack it into {tmp_path / "cache"} (it holds '
          'cifar-10-batches-bin/)') in str(offline.value)
  monkeypatch.setitem(download.RELEASES, 'cifar10', release)
  # The next run downloads it whole.
  assert len(_open().train) == 20 and len(served) == 3


def test_an_archive_cannot_write_outside_its_folder(tmp_path):
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode='w:gz') as tar:
    for name in ('cifar-10-batches-bin/test_batch.bin', '../escaped',
                 'cifar-10-batches-bin/../../escaped2'):
      info = tarfile.TarInfo(name)
      info.size = 1
      tar.addfile(info, io.BytesIO(b'x'))
  (tmp_path / 'archive.tar.gz').write_bytes(buffer.getvalue())
  (tmp_path / 'into').mkdir()
  download._unpack(  # pylint: disable=protected-access
      tmp_path / 'archive.tar.gz', tmp_path / 'into', 'cifar-10-batches-bin')
  assert not any((tmp_path / name).exists() for name in ('escaped', 'escaped2'))
  assert (tmp_path / 'into' / 'cifar-10-batches-bin' /
          'test_batch.bin').read_bytes() == b'x'
