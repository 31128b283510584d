"""vit_jax.runtime.command: what every command does with its flags and its log."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests import helpers

_BAD_CONFIGS = {
    'syntax.py': 'def get_config(:\n',
    'raises.py': 'def get_config():\n  raise RuntimeError("boom")\n',
    'raises_on_import.py': 'import nonexistent_module_xyz\n',
    'opens.py': 'def get_config():\n  open("/nonexistent/labels.txt")\n',
    'bad.json': 'get_config = {}\n',
    'run.json': '{"seed": 1, "augment": true, "pixel_mean": [0.5, 0.5]}',
    'no_get_config.py': 'x = 1\n', 'calls.py':
        ('import config_helper_xyz\ndef get_config():\n'
         '  return config_helper_xyz.read()\n'
        ), 'config_helper_xyz.py': 'def read():\n  return {}["labels"]\n',
}

# (id, config, overrides, message); the first case loads first, before any
# config module whose get_config a file without one would be taken to have.
_UNLOADABLE = [
    ('no get_config', '{tmp}/no_get_config.py', (), '{tmp}/no_get_config.py '
     'defines no get_config(), the function that returns its config (see '
     'configs/cifar_small.py).'),
    ('refused argument', 'configs/cifar_small.py:vit_tiny', (),
     "Unknown model 'vit_tiny' after ':'; use one of vit, "
     'simple_cnn, small_resnet.'),
    ('missing file', '{tmp}/nope.py', (), 'no file {tmp}/nope.py'),
    ('missing file, overridden', '{tmp}/nope.py', ('--config.num_epochs=1',),
     'no file {tmp}/nope.py'),
    ('syntax error', '{tmp}/syntax.py', ('--config.num_epochs=1',),
     '{tmp}/syntax.py, line 1: invalid syntax; fix the file.'),
    ('raises', '{tmp}/raises.py', (),
     '{tmp}/raises.py, line 2: RuntimeError: boom'),
    ('raises on import', '{tmp}/raises_on_import.py', ('--config.seed=3',),
     "{tmp}/raises_on_import.py, line 1: ModuleNotFoundError: No module "
     "named 'nonexistent_module_xyz'"),
    ('raises OSError', '{tmp}/opens.py', (),
     "{tmp}/opens.py, line 2: FileNotFoundError: [Errno 2] No such file or "
     "directory: '/nonexistent/labels.txt'"),
    ('raises in code it calls', '{tmp}/calls.py', ('--config.seed=1',),
     "{tmp}/calls.py, line 3 (raised in {tmp}/config_helper_xyz.py, line 2): "
     "KeyError: 'labels'"),
    ('not JSON', '{tmp}/bad.json', ('--config.seed=1',), '{tmp}/bad.json '
     'is not a JSON config (Expecting value: line 1 column 1 (char 0))'),
    ('missing JSON', '{tmp}/nope.json', (), "{tmp}/nope.json is not "
     "a JSON config ([Errno 2] No such file or directory: '{tmp}/nope.json')"),
]
# Each case parsed in one process as `app.run` parses the flags: a
# SystemExit with the line, which Python prints to stderr with status 1.
_PARSED_BY = """
import json, sys
from absl import flags
import vit_jax.{command}
from vit_jax.runtime import command
for argv in json.loads(sys.argv[1]):
  sys.argv = argv  # where ml_collections finds the overrides
  try:
    command.parse_flags(argv)
    print(json.dumps(flags.FLAGS.config.to_dict()))
  except SystemExit as e:
    print(json.dumps(e.code))
  flags.FLAGS.unparse_flags()
"""


@pytest.mark.parametrize('command, target',
                         [('main', '--workdir={tmp}/run'),
                          ('evaluate', '--checkpoint={tmp}/run')])
def test_a_config_that_cannot_load_is_one_line_for_every_command(
    tmp_path, command, target):
  for name, text in _BAD_CONFIGS.items():
    (tmp_path / name).write_text(text)
  fill = lambda text: text.format(tmp=tmp_path)
  twice = '--config.model_overrides.num_layers='  # a new field: 1 makes an int
  flags = [
      # First an override without --config: ml_collections defines none yet.
      ['--config.seed=3'],
      *([f'--config={fill(config)}', *overrides]
        for _, config, overrides, _ in _UNLOADABLE),
      # A run's config.json loads, JSON's true included, and takes overrides.
      [f'--config={tmp_path}/run.json', '--config.seed=3'],
      ['--config=configs/cifar_small.py', f'{twice}1', f'{twice}abc']
  ]
  argvs = [[command, *each, fill(target)] for each in flags]
  script = _PARSED_BY.format(command=command)
  out = helpers.run_python('-c', script, json.dumps(argvs),
                           env={**os.environ, 'PYTHONPATH': str(tmp_path)})
  assert out.returncode == 0 and not out.stderr, out.stderr[-3000:]
  said = [json.loads(line) for line in out.stdout.splitlines()]
  assert said[-len(argvs):] == [
      'error: --config.seed overrides a field of --config: pass '
      '--config=FILE too (e.g. configs/cifar_small.py).',
      *(f'error: --config cannot be loaded: {fill(message)}'
        for *_, message in _UNLOADABLE),
      dict(seed=3, augment=True, pixel_mean=[0.5, 0.5]),
      "error: the --config.FIELD=VALUE flags cannot be applied (TypeError: "
      "Could not override field 'num_layers' (reference). abc is of original "
      "type <class 'str'> and cannot be casted to type <class 'int'>): give "
      'each field once.'
  ]
  assert not (tmp_path / 'run').exists()


_MISSING = ('{missing} does not exist: pass a vit_jax.main workdir (or its '
            'best_checkpoint), an official .npz, a timm model.safetensors or '
            'hub folder, or a transformers ViT folder.')


# Whatever reads a checkpoint, and analyze's other arguments; nothing written.
@pytest.mark.parametrize('command, arguments, line', [
    ('evaluate', ('--checkpoint={missing}',), _MISSING),
    ('convert', ('{missing}', '{tmp}/out.npz', '--format=npz'), _MISSING),
    ('analyze',
     ('--checkpoint={missing}', '--images={tmp}', '--out={tmp}/out'), _MISSING),
    ('analyze', ('{tmp}', '--out={tmp}/out'),
     'unexpected arguments {tmp}; pass a run as --workdir=DIR or a checkpoint '
     'as --checkpoint=SOURCE, and images as --images=DIR or '
     '--images=A.jpg,B.jpg.'),
    ('analyze', ('--num_images=abc', '--out={tmp}/out'),
     "flag --num_images=abc: invalid literal for int() with base 10: 'abc'; "
     '--helpshort lists the flags.'),
])
def test_a_missing_checkpoint_or_a_bad_argument_is_one_line(
    tmp_path, command, arguments, line):
  fill = lambda text: text.format(missing=tmp_path / 'vit.npz', tmp=tmp_path)
  out = helpers.run_module(f'vit_jax.{command}', *map(fill, arguments),
                           status=1)
  assert out.stderr.splitlines() == [f'error: {fill(line)}']
  assert not any(tmp_path.iterdir())


def test_libraries_info_records_are_left_out_unless_asked_for():
  import logging as python_logging  # pylint: disable=g-import-not-at-top
  from absl import logging  # pylint: disable=g-import-not-at-top
  from vit_jax.runtime import command  # pylint: disable=g-import-not-at-top

  command.quiet_libraries()
  command.quiet_libraries()  # once is enough
  handler = logging.get_absl_handler()
  assert handler.filters.count(command._quiet_libraries) == 1  # pylint: disable=protected-access
  shown = lambda path, level, exc_info=None: handler.filter(
      python_logging.LogRecord('absl', level, path, 1, 'm', (), exc_info))
  orbax = '/site-packages/orbax/checkpoint/checkpoint_manager.py'
  assert not shown(orbax, python_logging.INFO)
  assert not shown(orbax, python_logging.WARNING)
  assert shown(orbax, python_logging.ERROR)
  assert not shown(orbax, python_logging.ERROR, (OSError, OSError(), None))
  assert shown(str(helpers.ROOT / 'vit_jax/training/train.py'),
               python_logging.INFO)
  jax_backends = '/site-packages/jax/_src/xla_bridge.py'
  assert not shown(jax_backends, python_logging.INFO)
  assert shown(jax_backends, python_logging.WARNING)
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.DEBUG)  # --verbosity=1
  try:
    assert shown(orbax, python_logging.INFO)
  finally:
    logging.set_verbosity(verbosity)


def test_help_shows_each_command_its_flags_with_one_text_each():
  processes = {
      name: subprocess.Popen(
          [sys.executable, '-m', f'vit_jax.{name}', '--help'], cwd=helpers.ROOT,
          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
      for name in ('main', 'evaluate', 'analyze', 'convert')
  }
  shown = {name: p.communicate()[0] for name, p in processes.items()}
  assert all('Try --helpfull' in text for text in shown.values()), shown
  flag_help = lambda text, flag: re.search(
      rf'^  --{flag}: (.*(?:\n    (?!\().*)*)', text, re.M)[1].split()
  for flag, readers in (('checkpoint', ('evaluate', 'analyze')),
                        ('model', ('evaluate', 'analyze', 'convert')),
                        ('step', ('evaluate', 'analyze', 'convert')),
                        ('data_dir', ('evaluate', 'analyze'))):
    assert len({' '.join(flag_help(shown[r], flag)) for r in readers}) == 1
  for flag in ('cpu_devices', 'coordinator_address', 'num_processes',
               'process_id', 'lost_process_timeout'):
    assert flag_help(shown['main'], flag) == flag_help(shown['evaluate'], flag)
  assert '--config.FIELD=VALUE' in shown['main']
  assert '--config.num_epochs=1' in shown['main']
  assert 'vit_jax/config_schema.py' in shown['main']
  assert '`vit_jax.checkpoints.export`' in shown['convert']
  assert '--data_dir=DIR' in shown['evaluate']
  assert not any('shared/data' in text for text in shown.values())
