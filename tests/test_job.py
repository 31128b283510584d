"""vit_jax.job: a command's work run as one process (here: alone), and how
it ends."""

import pathlib
import subprocess
import sys

from absl import flags
import pytest

from vit_jax import job
from vit_jax.errors import ConfigError


@pytest.fixture(autouse=True)
def a_process_alone(monkeypatch):
  """The command's flags parsed (for the test only); its CPU devices set
  when this process's JAX started (a command sets them before JAX
  starts); no job to join, whatever the environment says."""
  was_parsed = flags.FLAGS.is_parsed()
  if not was_parsed:
    flags.FLAGS.mark_as_parsed()
  monkeypatch.setattr(job.distributed, 'set_cpu_devices', lambda count: None)
  monkeypatch.setattr(job.distributed, 'initialize_distributed',
                      lambda *args: False)
  yield
  if not was_parsed:
    flags.FLAGS.unparse_flags()


def test_work_that_returns_exits_0():
  done = []
  with pytest.raises(SystemExit) as exit_:
    job.run(lambda: done.append(True), cpu_devices=None)
  assert exit_.value.code == 0 and done == [True]


def test_a_problem_the_message_explains_is_one_line_and_status_1(capsys):
  def work():
    raise ConfigError('config.batch_size=0 must be positive: set it to 128.')

  with pytest.raises(SystemExit) as exit_:
    job.run(work, cpu_devices=None)
  assert exit_.value.code == 1
  assert capsys.readouterr().err.splitlines()[-1] == (
      'error: config.batch_size=0 must be positive: set it to 128.')


def test_a_bug_keeps_its_traceback():
  def work():
    raise KeyError('a bug')

  with pytest.raises(KeyError):
    job.run(work, cpu_devices=None)


ROOT = pathlib.Path(__file__).resolve().parents[1]

_BAD_CONFIGS = {
    'syntax.py': 'def get_config(:\n',
    'raises.py': 'def get_config():\n  raise RuntimeError("boom")\n',
    'raises_on_import.py': 'import nonexistent_module_xyz\n',
}


@pytest.mark.parametrize('command, target', [
    ('main', '--workdir={tmp}/run'), ('evaluate', '--checkpoint={tmp}/run')])
@pytest.mark.parametrize('config, overrides, message', [
    ('configs/cifar_small.py:vit_tiny', (),
     "Unknown model 'vit_tiny' for cifar_small.py; use one of vit, "
     'simple_cnn, small_resnet.'),
    ('{tmp}/nope.py', (), 'no file {tmp}/nope.py'),
    ('{tmp}/nope.py', ('--config.num_epochs=1',), 'no file {tmp}/nope.py'),
    ('{tmp}/syntax.py', ('--config.num_epochs=1',),
     '{tmp}/syntax.py, line 1: invalid syntax; fix the file.'),
    ('{tmp}/raises.py', (),
     '{tmp}/raises.py, line 2: RuntimeError: boom'),
    ('{tmp}/raises_on_import.py', ('--config.seed=3',),
     "{tmp}/raises_on_import.py, line 1: ModuleNotFoundError: No module "
     "named 'nonexistent_module_xyz'"),
], ids=['refused argument', 'missing file', 'missing file, overridden',
        'syntax error', 'raises', 'raises on import'])
def test_a_config_that_cannot_load_is_one_line_for_every_command(
    tmp_path, command, target, config, overrides, message):
  for name, text in _BAD_CONFIGS.items():
    (tmp_path / name).write_text(text)
  fill = lambda text: text.format(tmp=tmp_path)
  out = subprocess.run(
      [sys.executable, '-m', f'vit_jax.{command}', f'--config={fill(config)}',
       *overrides, fill(target)],
      cwd=ROOT, capture_output=True, text=True, check=False)
  assert out.returncode == 1
  assert out.stderr.strip().splitlines() == [
      f'error: --config cannot be loaded: {fill(message)}']
  assert not (tmp_path / 'run').exists()
