"""What tests share besides fixtures: data, configs, processes, parameters."""

import contextlib
import functools
import io
import json
import os
import pathlib
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from configs import cifar_small
from vit_jax import config_schema
from vit_jax import models

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
    label_columns = np.stack([labels // 5, labels],
                             1) if label_bytes == 2 else (labels[:, None])
    np.concatenate([label_columns.astype(np.uint8),
                    _planar(images)], axis=1).tofile(folder / name)


def cifar10_files(train, test) -> dict:
  """The binary release's files: `train` over five files, `test` in one."""
  images, labels = train
  return {
      f'data_batch_{i}.bin': (images[part], labels[part])
      for i, part in enumerate(np.array_split(np.arange(len(labels)), 5), 1)
  } | {'test_batch.bin': test}


CIFAR10_CLASSES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog',
                   'frog', 'horse', 'ship', 'truck')


def cifar10_release(data_dir: pathlib.Path, num_train: int, num_test: int = 37,
                    seeds=(1, 3)) -> pathlib.Path:
  """`data_dir`, holding a CIFAR-10 binary release of `seeds`' random images."""
  write_cifar_binary(
      data_dir / 'cifar-10-batches-bin',
      cifar10_files(random_cifar(num_train, 10, seed=seeds[0]),
                    random_cifar(num_test, 10, seed=seeds[1])))
  (data_dir / 'cifar-10-batches-bin' / 'batches.meta.txt').write_text(
      '\n'.join(CIFAR10_CLASSES) + '\n\n')  # as the release's ends
  return data_dir


def write_cifar_python(folder: pathlib.Path, files: dict, label_key=b'labels',
                       extra=None):
  folder.mkdir(parents=True)
  for name, (images, labels) in files.items():
    record = {b'data': _planar(images), label_key: labels.tolist()}
    (folder / name).write_bytes(pickle.dumps({**record, **(extra or {})}))


def png(image: np.ndarray) -> bytes:
  from PIL import Image  # pylint: disable=g-import-not-at-top
  buffer = io.BytesIO()
  Image.fromarray(image).save(buffer, format='PNG')
  return buffer.getvalue()


def write_image_folder(root: pathlib.Path, counts: dict, classes=('cat', 'dog'),
                       draw=None) -> dict:
  """root/<split>/<class>/<i>.png: `counts[split]` a class (or a count a
  class), each `draw(rng, i, label)` (random 8x8); {split: (image, label)s}."""
  rng = np.random.default_rng(0)
  draw = draw or (lambda rng, *_: rng.integers(0, 256, (8, 8, 3), np.uint8))
  written = {}
  for split, count in counts.items():
    per_class = count if isinstance(count, tuple) else (count,) * len(classes)
    for label, (name, n) in enumerate(zip(classes, per_class)):
      (root / split / name).mkdir(parents=True)
      for i in range(n):
        image = draw(rng, i, label)
        (root / split / name / f'{i}.png').write_bytes(png(image))
        written.setdefault(split, []).append((image, label))
  return written


def prepare_tfds_array_record(data_dir: pathlib.Path, class_name: str,
                              num_train: int, num_test: int, image_shape,
                              names=None) -> str:
  """The `config.dataset` name of a 3-class array_record tfds dataset of
  random PNG images, `image_shape(i)` for the i-th, made without TensorFlow;
  its classes named `names`, else numbered."""
  tfds = pytest.importorskip('tensorflow_datasets')
  same = image_shape(0) == image_shape(1)
  static_shape = image_shape(0) if same else (None, None, 3)

  def info(self):
    return tfds.core.DatasetInfo(
        builder=self, features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=static_shape),
            'label': tfds.features.ClassLabel(names=names,
                                              num_classes=None if names else 3)
        }))

  def split_generators(self, dl_manager):
    del dl_manager
    return dict(train=self._generate_examples(num_train, 0),
                test=self._generate_examples(num_test, 1))

  def generate_examples(self, count, seed):
    del self
    rng = np.random.default_rng(seed)
    for i in range(count):
      image = rng.integers(0, 256, image_shape(i), np.uint8)
      yield i, {'image': io.BytesIO(png(image)), 'label': i % 3}

  # No code_path: no checksums file to look up beside this module.
  builder_class = type(
      class_name, (tfds.core.GeneratorBasedBuilder,),
      dict(VERSION=tfds.core.Version('1.0.0'), code_path=None, _info=info,
           _split_generators=split_generators,
           _generate_examples=generate_examples))
  builder = builder_class(data_dir=str(data_dir), file_format='array_record')
  builder.download_and_prepare()
  return f'tfds:{builder.name}'


TINY_MODELS = dict(
    vit=dict(num_layers=1, hidden_size=16, num_heads=2, mlp_dim=32,
             patch_size=8), simple_cnn=dict(widths=(4, 4, 8, 8, 8)))


def finished_run(directory: pathlib.Path, seed: int = 3, model: str = 'vit',
                 history: list | None = None, config: dict | None = None,
                 **summary):
  """A finished run as runners read it, in place of any; `config` and `summary`
  edit its JSON, `history` the records of its metrics.jsonl (None: none)."""
  shutil.rmtree(directory, ignore_errors=True)
  directory.mkdir(parents=True)
  config = dict(model=cifar_small.MODELS[model][0], seed=seed) | (config or {})
  (directory / 'config.json').write_text(json.dumps(config))
  if history is not None:
    (directory / 'metrics.jsonl').write_text(''.join(
        json.dumps(record) + '\n' for record in history))
  (directory / 'summary.json').write_text(
      json.dumps(
          dict(best_test_accuracy=0.514, best_epoch=28.0, epochs=30.0,
               final_test_accuracy=0.513, final_train_accuracy=0.57,
               train_seconds=989.2) | summary))


def edit_json(path: pathlib.Path, **fields):
  """Sets `fields` in the JSON object at `path`."""
  path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def schema_config(**fields) -> ml_collections.ConfigDict:
  """The config schema's defaults, `fields` set."""
  config = config_schema.defaults()
  config.update(fields)
  return config


def steps_saved(workdir, folder: str = 'checkpoints') -> list[int]:
  """The steps whose checkpoints `workdir / folder` holds."""
  from vit_jax.checkpoints import run_checkpoints  # pylint: disable=g-import-not-at-top
  with run_checkpoints.RunCheckpoints(pathlib.Path(workdir) / folder) as saved:
    return saved.steps()


def untrained_run(workdir: pathlib.Path, config, params) -> pathlib.Path:
  """`workdir`, a run of `config` whose one checkpoint (step 0) is `params`."""
  from vit_jax.checkpoints import run_checkpoints  # pylint: disable=g-import-not-at-top
  saved = json.loads(config.to_json_best_effort())
  workdir.mkdir()
  (workdir / 'config.json').write_text(json.dumps(saved))
  with run_checkpoints.RunCheckpoints(workdir / 'checkpoints', 1) as run:
    run.save(0, {'params': params}, {'count': np.zeros(())}, [], {}, saved)
  return workdir


def tiny_config(data_dir, variant='vit', model_fields=None, **overrides):
  """The study's config, cut down to seconds: 96 train / 37 test images;
  `model_fields` set in its model_overrides."""
  config = cifar_small.get_config(variant)
  config.model_overrides = TINY_MODELS[variant] | (model_fields or {})
  config.update(data_dir=str(data_dir), train_examples_per_file=0,
                test_examples=0, batch_size=16, eval_batch_size=16,
                num_epochs=2, warmup_epochs=1)
  config.update(overrides)
  return config


def trained_vit_config(data_dir) -> ml_collections.ConfigDict:
  """The config `trained_vit_run` trains."""
  return tiny_config(data_dir, num_epochs=1, image_size=24,
                     model_fields=dict(num_layers=2))


def process_test_config(data_dir) -> ml_collections.ConfigDict:
  """What the kill and signal tests run: 40 steps of a small ViT, 1 device."""
  return tiny_config(
      data_dir, total_steps=40, num_epochs=0, log_every_steps=3,
      eval_every_steps=8, checkpoint_every_steps=4, cpu_devices=1,
      model_fields=dict(num_layers=2, hidden_size=64, num_heads=4, mlp_dim=128,
                        patch_size=4))


def with_host_devices(devices: int) -> dict:
  """os.environ with `devices` CPU devices added to the suite's XLA_FLAGS."""
  flags = (os.environ.get('XLA_FLAGS', '') +
           f' --xla_force_host_platform_device_count={devices}')
  return {**os.environ, 'XLA_FLAGS': flags.strip()}


def run_on_host_devices(script: str, devices: int, cwd=ROOT,
                        timeout: float = 300) -> str:
  """The stdout of `script` run by a fresh Python on `devices` CPU devices."""
  env = with_host_devices(devices)
  env['PYTHONPATH'] = os.pathsep.join(
      filter(None, [str(ROOT), env.get('PYTHONPATH')]))
  return run_python('-c', script, env=env, cwd=cwd, timeout=timeout,
                    status=0).stdout


@contextlib.contextmanager
def mounted_tmpfs(mount_point: pathlib.Path, size: str):
  """A tmpfs of `size` ('32m'): a real disk that fills (root only)."""
  mount_point.mkdir(parents=True, exist_ok=True)
  mounted = subprocess.run(
      ['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs',
       str(mount_point)], capture_output=True, text=True, check=False)
  if mounted.returncode:
    pytest.skip(f'cannot mount a tmpfs here: {mounted.stderr.strip()}')
  try:
    yield mount_point
  finally:
    subprocess.run(['umount', '-l', str(mount_point)], check=False)


# ------------------------------------------- runs in real processes --------

_TIMINGS = ('images_per_second', 'flops_per_second', 'seconds', 'phase_seconds')


def history(workdir, name: str = 'metrics.jsonl') -> list[dict]:
  """The records of a run's metrics.jsonl, or of its JSON-lines file `name`."""
  lines = (pathlib.Path(workdir) / name).read_text().splitlines()
  return [json.loads(line) for line in lines]


def tensorboard_events(workdir, folder: str = 'training') -> list:
  """The events in the TFRecord-framed files of the run's TensorBoard `folder`."""
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  events = []
  for path in sorted(
      (pathlib.Path(workdir) / 'tensorboard' / folder).glob('events.out.*')):
    data = path.read_bytes()
    while data:
      length = int.from_bytes(data[:8], 'little')
      events.append(event_pb2.Event.FromString(data[12:12 + length]))
      data = data[12 + length + 4:]
  return events


# `history` but for the timings, which no two runs share.
def untimed_history(workdir) -> list[dict]:
  return [{k: v for k, v in r.items() if k not in _TIMINGS}
          for r in history(workdir)]


_PROCESS_CONFIG = '''
import sys
sys.path.insert(0, {root!r})
from tests import helpers
def get_config():
  config = helpers.{function}({data_dir!r})
  config.update({overrides!r})
  return config
'''


def write_process_config(tmp_path, data_dir, function='process_test_config',
                         **overrides) -> pathlib.Path:
  """A config file for `python -m vit_jax.main`: `function(data_dir)` here."""
  config_file = tmp_path / 'process_config.py'
  config_file.write_text(
      _PROCESS_CONFIG.format(root=str(ROOT), data_dir=str(data_dir),
                             function=function, overrides=overrides))
  return config_file


def run_python(*args, status: int | None = None, cwd=ROOT, **kwargs):
  """`python *args` in `cwd`, the repository's root unless told, run to its
  end: its exit status `status`, if given, or its stderr said."""
  out = subprocess.run([sys.executable, *map(str, args)], cwd=cwd,
                       capture_output=True, text=True, check=False, **kwargs)
  assert status is None or out.returncode == status, out.stderr[-3000:]
  return out


def run_module(module: str, *args, **kwargs):
  return run_python('-m', module, *args, **kwargs)


def script_main(monkeypatch, main, *argv):
  """`main()` of a script that parses sys.argv, run as `argv`."""
  monkeypatch.setattr(sys, 'argv', list(argv))
  return main()


def interrupted(module: str, *args, ready=None) -> str:
  """`python -m module`'s stderr, Ctrl-C at `ready()` or its first output."""
  # A file, not a pipe: a command that logs much never waits on the reader.
  with tempfile.TemporaryFile('w+') as log:
    process = subprocess.Popen([sys.executable, '-m', module, *map(str, args)],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    wait_until(ready or (lambda: os.fstat(log.fileno()).st_size),
               process=process)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)
    log.seek(0)
    stderr = log.read()
  assert process.returncode == 130, stderr
  return stderr


def start_main(config_file, workdir, log_path, *flags, new_session=False):
  """`python -m vit_jax.main` in the background, its output in `log_path`."""
  with open(log_path, 'w') as log:
    return subprocess.Popen([
        sys.executable, '-m', 'vit_jax.main', f'--config={config_file}',
        f'--workdir={workdir}', *flags
    ], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, 'JAX_PLATFORMS': 'cpu'},
                            start_new_session=new_session)


def wait_until(condition, timeout: float = 60, process=None, output=str):
  """Waits for `condition()`; fails, saying `output()`, once `process` (or one
  of a list of processes) has ended or at `timeout`."""
  deadline = time.monotonic() + timeout
  watched = process if isinstance(process, list) else [process]
  while not condition():
    assert all(p is None or p.poll() is None
               for p in watched), f'ended: {output()}'
    assert time.monotonic() < deadline, f'not within {timeout} s: {output()}'
    time.sleep(0.005)


def wait_for_step(process, workdir, step, timeout=120):
  """Returns once metrics.jsonl logs `step` or later; fails as `wait_until`."""
  metrics = pathlib.Path(workdir) / 'metrics.jsonl'

  def logged() -> bool:
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    return bool(lines) and json.loads(lines[-1])['step'] >= step

  wait_until(logged, timeout, process)


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def start_two_process_job(command, tmp_path, devices: int = 1):
  """The processes and log paths of a 2-process job of `python -m command`."""
  address = f'127.0.0.1:{free_port()}'
  env = {**with_host_devices(devices), 'JAX_PLATFORMS': 'cpu'}
  processes, logs = [], []
  for process_id in range(2):
    logs.append(tmp_path / f'process_{process_id}.log')
    with logs[-1].open('w') as log:
      processes.append(
          subprocess.Popen([
              sys.executable, '-m', *command,
              f'--coordinator_address={address}', '--num_processes=2',
              f'--process_id={process_id}'
          ], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
  return processes, logs


def start_two_processes(config_file, workdir, tmp_path, *flags, devices=1):
  """A 2-process job of `python -m vit_jax.main` (`start_two_process_job`)."""
  return start_two_process_job([
      'vit_jax.main', f'--config={config_file}', f'--workdir={workdir}', *flags
  ], tmp_path, devices)


def wait_all(processes, timeout=300) -> list[int]:
  """The exit statuses; processes still running after `timeout` are killed."""
  try:
    for process in processes:
      process.wait(timeout=timeout)
  finally:
    for process in processes:
      if process.poll() is None:
        process.kill()
        process.wait()
  return [process.returncode for process in processes]


def one_device() -> jax.sharding.Sharding:
  return jax.sharding.SingleDeviceSharding(jax.devices()[0])


def normal(shape, seed: int = 0):
  """Float32 N(0, 1) draws, in numpy: jax.random would compile per shape."""
  return jnp.asarray(
      np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def randomized(params, seed: int = 0):
  """`params` or shapes as 0.3 N(0, 1), +1 for vectors: no zero hides a swap."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(
      lambda a: jnp.asarray(0.3 * rng.standard_normal(a.shape) +
                            (a.ndim == 1), a.dtype), params)


def compiled(function, *arrays, **static):
  """`function(*arrays, **static)` as one program; `static` is not traced."""
  return jax.jit(functools.partial(function, **static))(*arrays)


def random_params(module, *inputs, seed: int = 0, **kwargs):
  """`randomized` parameters of `module` on `inputs`, never initialized."""
  init = functools.partial(module.init, **kwargs)  # train=: not traced
  return randomized(
      jax.eval_shape(init, jax.random.key(0), *inputs)['params'], seed)


# The ViT the model tests build: 2 blocks of width 32, 4x4 patches.
SMALL = dict(patch_size=4, hidden_size=32, num_layers=2, num_heads=4,
             mlp_dim=64)


def small_vit(num_classes: int = 5, **fields):
  """A VisionTransformer of `SMALL`'s size, `fields` set."""
  return models.VisionTransformer(num_classes=num_classes, **(SMALL | fields))


def images(batch: int = 2, size: int = 16, seed: int = 1):
  """`normal` NHWC images; at size 16, a 4x4 grid of `SMALL`'s patches."""
  return normal((batch, size, size, 3), seed)


def assert_trees_close(actual, desired, **tolerances):
  """assert_allclose leaf by leaf; the trees' structures must match too."""
  jax.tree.map(functools.partial(np.testing.assert_allclose, **tolerances),
               actual, desired)


def flat(tree) -> dict:
  """`tree` as one dict, its paths joined by '/'."""
  return flax.traverse_util.flatten_dict(tree, sep='/')


def shapes(tree) -> dict:
  return {path: a.shape for path, a in flat(tree).items()}


def init_shapes(model, inputs):
  """`model`'s output on `inputs` and its parameters' `shapes`, none computed."""
  out, variables = jax.eval_shape(
      lambda: model.init_with_output(jax.random.key(0), inputs, train=False))
  assert set(variables) == {'params'}
  return out, shapes(variables['params'])


def param_shapes(model, inputs) -> dict:
  """The `shapes` of `model`'s parameters on `inputs`, none computed."""
  return init_shapes(model, inputs)[1]


def random_cnn_variables(module, images, seed: int = 0) -> dict:
  """Kernels N(0, 1/fan-in), BatchNorm variances U(.5, 1.5), others N(0, 1)."""
  rng = np.random.default_rng(seed)

  def draw(path, a):
    if path[-1].key == 'var':
      return jnp.asarray(rng.uniform(0.5, 1.5, a.shape), a.dtype)
    fan_in = np.prod(a.shape[:-1]) if a.ndim > 1 else 1
    return jnp.asarray(rng.standard_normal(a.shape) / np.sqrt(fan_in), a.dtype)

  return jax.tree.map_with_path(
      draw,
      jax.eval_shape(
          lambda: module.init(jax.random.key(0), images, train=False)))


def random_vit_params(model, image_size: int, seed: int = 0) -> dict:
  """`random_params` of a ViT for `image_size` images, as numpy arrays."""
  return jax.device_get(
      random_params(model, np.zeros((1, image_size, image_size, 3), np.float32),
                    seed=seed, train=False))


def one_block_vit(name: str, **fields):
  """A registered ViT of one block, 7 classes, random params for 2x2 patches."""
  model = models.create_model(name, 7, num_layers=1, **fields)
  return model, random_vit_params(model, 2 * model.effective_patch_size)
