"""The session: Ctrl-C as at a terminal, one XLA cache, shared fixtures."""

import importlib
import os
import pathlib
import shutil
import signal
import tempfile

import numpy as np
import pytest

# The helpers' asserts explain their failures as the tests' do.
pytest.register_assert_rewrite('tests.helpers')
from tests import helpers  # pylint: disable=g-import-not-at-top,wrong-import-position
from vit_jax.runtime import stop_signals
from vit_jax.runtime import workdir_lock

# pytest reports an exception raised in a destructor by importing tracemalloc
# then. tensorflow_datasets imports its modules inside etils' lazy_imports,
# which makes every import a lazy proxy, in all threads: a destructor that
# fails while one is open would fail the report itself, and the test with
# it. Imported now, the report finds the module already loaded.
importlib.import_module('tracemalloc')

# The tests press Ctrl-C on the commands they start as a person at a
# terminal does. A suite started with Ctrl-C ignored (`nohup pytest &`, some
# CI runners) would hand that on to every command, which keeps it ignored
# (stop_signals): Python's default here, which its commands start with.
signal.signal(signal.SIGINT, signal.default_int_handler)

# The suite compiles hundreds of tiny programs and runs each a few steps, for
# which XLA's backend optimizations cost more than they save: without them
# training tests take a quarter less CPU time. The processes tests start
# inherit it; the pinned losses hold within 2e-6 either way.
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_backend_optimization_level=0').strip()

# One XLA compilation cache for the session, shared with pytest-xdist's
# workers and the processes the tests start (they copy os.environ): the suite
# compiles the same tiny steps many times, and a rerun after kill -9
# compiles what the killed run did. Fresh each session, so no test reads
# what other code compiled: the controller (or a run without workers) makes
# it and removes it at the end; one whose session was killed first (kill,
# `timeout`) goes at the next session's start.
_CACHE_PREFIX = 'vit_jax_tests_xla_cache_'
_compilation_cache = None


def _is_xdist_worker(config) -> bool:
  return hasattr(config, 'workerinput')


def pytest_configure(config):
  global _compilation_cache
  if _is_xdist_worker(config):
    _compilation_cache = os.environ['JAX_COMPILATION_CACHE_DIR']
  else:
    # First the caches of sessions killed before they could remove theirs.
    for cache in pathlib.Path(tempfile.gettempdir()).glob(f'{_CACHE_PREFIX}*'):
      pid = cache.name[len(_CACHE_PREFIX):].split('_')[0]
      if pid.isdigit() and not workdir_lock.process_exists(int(pid)):
        shutil.rmtree(cache, ignore_errors=True)
    _compilation_cache = tempfile.mkdtemp(
        prefix=f'{_CACHE_PREFIX}{os.getpid()}_')
    os.environ['JAX_COMPILATION_CACHE_DIR'] = _compilation_cache
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update('jax_compilation_cache_dir', _compilation_cache)


def pytest_unconfigure(config):
  if not _is_xdist_worker(config):
    shutil.rmtree(_compilation_cache, ignore_errors=True)


def pytest_collection_modifyitems(items):
  """The largest files first: under `--dist loadfile` workers end together."""
  items.sort(key=lambda item: -item.path.stat().st_size)


@pytest.fixture(autouse=True)
def _signals_released():
  """Releases the signals a command's `main` called in-process caught."""
  yield
  stop_signals.release()


@pytest.fixture
def cifar10_splits():
  """The files of a CIFAR-10 binary release: 96 training and 37 test images."""
  first, second = (helpers.random_cifar(48, 10, seed=s) for s in (1, 2))
  return helpers.cifar10_files([np.concatenate(a) for a in zip(first, second)],
                               helpers.random_cifar(37, 10, seed=3))


@pytest.fixture
def cifar10_dir(tmp_path, cifar10_splits):
  """The data_dir of `cifar10_splits` written as the binary release."""
  helpers.write_cifar_binary(tmp_path / 'data' / 'cifar-10-batches-bin',
                             cifar10_splits)
  return tmp_path / 'data'


@pytest.fixture(scope='session')
def trained_cnn_run(tmp_path_factory):
  """(workdir, data_dir) of a tiny SimpleCNN trained one epoch: a teacher."""
  from vit_jax.training import train  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('trained_cnn_run')
  helpers.cifar10_release(root / 'data', 48, 16)
  # Every step evaluated and kept, and the best one too: a teacher read at
  # its best can be checked against the step it names.
  config = helpers.tiny_config(root / 'data', 'simple_cnn', num_epochs=1,
                               warmup_epochs=0, eval_every_steps=1,
                               checkpoint_every_steps=1, keep_checkpoints=3,
                               keep_best_checkpoint=True)
  train.train_and_evaluate(config, root / 'teacher')
  return root / 'teacher', root / 'data'


_TRAIN_SCRIPT = '''
from tests.helpers import trained_vit_config
from vit_jax.training import train
train.train_and_evaluate(trained_vit_config({data_dir!r}), {workdir!r})
'''


@pytest.fixture(scope='session')
def trained_vit_run(tmp_path_factory):
  """(workdir, data_dir) of a 2-layer ViT trained at 24x24 on 2 devices."""
  root = tmp_path_factory.mktemp('trained_vit_run')
  data_dir = helpers.cifar10_release(root / 'data', 96)
  helpers.run_on_host_devices(
      _TRAIN_SCRIPT.format(data_dir=str(data_dir), workdir=str(root / 'run')),
      2, timeout=900)
  return root / 'run', data_dir


@pytest.fixture(scope='session')
def uninterrupted(tmp_path_factory):
  """(data_dir, workdir) of `process_test_config` run without a stop."""
  from vit_jax.training import train  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('uninterrupted')
  helpers.cifar10_release(root / 'data', 80)
  train.train_and_evaluate(helpers.process_test_config(root / 'data'),
                           root / 'run')
  return root / 'data', root / 'run'
