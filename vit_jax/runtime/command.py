"""Every command's flags and log; a bad flag is one `error:` line."""

import functools
import logging as python_logging
import os
import pathlib
import re
import sys
import traceback

from absl import flags
from absl import logging
import ml_collections
from ml_collections import config_flags

from vit_jax import errors
from vit_jax.runtime import distributed


def _config_files(argv: list[str]) -> set[str]:
  """The resolved paths the --config (or -config) flags of `argv` name."""
  names = ('--config', '-config')
  prefixes = tuple(f'{name}=' for name in names)
  values = [arg.split('=', 1)[1] for arg in argv if arg.startswith(prefixes)]
  values += [after for arg, after in zip(argv, argv[1:]) if arg in names]
  return {str(pathlib.Path(value.split(':')[0]).resolve()) for value in values}


def _config_file_problem(error: BaseException,
                         config_files: set[str]) -> str | None:
  """The --config file's problem if loading it raised `error`, else None."""
  missing = sorted(f for f in config_files if not pathlib.Path(f).is_file())
  if missing:
    return 'no file ' + ', '.join(missing)
  *_, innermost = errors.causes(error)
  if "has no attribute 'get_config'" in str(innermost):
    return (f'{", ".join(sorted(config_files))} defines no get_config(), the '
            'function that returns its config (see configs/cifar_small.py).')
  if (isinstance(innermost, SyntaxError) and innermost.filename and
      str(pathlib.Path(innermost.filename).resolve()) in config_files):
    return (f'{innermost.filename}, line {innermost.lineno}: '
            f'{innermost.msg}; fix the file.')
  frames = traceback.extract_tb(innermost.__traceback__)
  in_file = [
      frame for frame in frames
      if str(pathlib.Path(frame.filename).resolve()) in config_files
  ]
  if not in_file:
    return None
  if isinstance(innermost, ValueError):  # the file's own refusal
    return str(innermost)
  where = f'{in_file[-1].filename}, line {in_file[-1].lineno}'
  if frames[-1] is not in_file[-1]:  # in code the file calls
    where += f' (raised in {frames[-1].filename}, line {frames[-1].lineno})'
  return f'{where}: {errors.first_line(innermost)}'


# Loads a run's config.json as a config file.
_JSON_CONFIG = (pathlib.Path(__file__).parents[1] / 'checkpoints' /
                'workdir_config.py')

_KINDS = {bool: 'true or false', int: 'an integer', float: 'a number'}


def _flag_error(error: flags.Error) -> str:
  """The error line; a config field's value of the wrong kind says its kind."""
  wrong = re.match(r'flag --(config\.[\w.]+)=(.*?): ', str(error))
  if not wrong or wrong[1] not in flags.FLAGS:
    return f'error: {str(error).rstrip(".")}; --helpshort lists the flags.'
  value = flags.FLAGS[wrong[1]].value
  kind = _KINDS.get(type(value), f'a {type(value).__name__}')
  return (f'error: --{wrong[1]}={wrong[2]}: {wrong[1]} is {kind} (the config: '
          f'{value!r}).')


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing; a bad flag or --config file is one `error:` line."""
  argv = [
      f'--config={_JSON_CONFIG}:{arg.split("=", 1)[1]}'
      if arg.startswith('--config=') and arg.endswith('.json') and
      ':' not in arg else arg for arg in argv
  ]
  try:
    remaining = flags.FLAGS(argv)
  except Exception as e:  # pylint: disable=broad-except
    # ml_collections lets whatever loading the file raised through.
    # A command without --config (analyze) has no config advice to give.
    configured = 'config' in flags.FLAGS
    if problem := configured and _config_file_problem(e, _config_files(argv)):
      sys.exit(f'error: --config cannot be loaded: {problem}')
    if configured and not isinstance(e, flags.Error):  # applying overrides
      sys.exit(f'error: the --config.FIELD=VALUE flags cannot be applied '
               f'({errors.first_line(e)}): give each field once.')
    if not isinstance(e, flags.Error):
      raise
    if (configured and isinstance(e, flags.UnrecognizedFlagError) and
        e.flagname.startswith('config.')):
      sys.exit(f'error: --{e.flagname} overrides a field of --config: pass '
               '--config=FILE too (e.g. configs/cifar_small.py).')
    sys.exit(_flag_error(e))
  # Without overrides, a config file that does not load stands in as an
  # object that raises what loading raised when used.
  config = flags.FLAGS['config'].value if 'config' in flags.FLAGS else None
  if config is not None and not isinstance(config, ml_collections.ConfigDict):
    try:
      config.keys()
    except Exception as e:  # pylint: disable=broad-except
      filename = config_flags.get_config_filename(flags.FLAGS['config'])
      problem = _config_file_problem(e, _config_files(['--config', filename]))
      sys.exit(f'error: --config cannot be loaded: {problem or e}')
  return remaining


# Where a command's own records come from: vit_jax, and the experiments and
# configs beside it.
_OURS = tuple(
    str(pathlib.Path(__file__).resolve().parents[2] / folder) + os.sep
    for folder in ('vit_jax', 'experiments', 'configs'))

# The flags `define_*` defines belong to the command that calls them: absl
# shows in --help only the main module's.
flags.disclaim_key_flags()

_SHARED_FLAGS = dict(
    checkpoint=(flags.DEFINE_string, 'Any checkpoint: '
                'a vit_jax.main workdir (WORKDIR/best_checkpoint: at its '
                'best evaluation), an official .npz, a timm '
                'model.safetensors or hub folder, a transformers ViT folder.'),
    model=(flags.DEFINE_string,
           "The checkpoint's architecture, e.g. ViT-B_16 (default: read from "
           'its shapes and config).'),
    step=(flags.DEFINE_integer,
          'For a workdir: the step of the checkpoint to read (default: the '
          'newest sound one).'),
    data_dir=(flags.DEFINE_string,
              'Where the dataset is, in place of config.data_dir (for a '
              'workdir whose data moved).'),
    cpu_devices=(
        functools.partial(flags.DEFINE_integer, lower_bound=1),
        'Host devices the batches are split over on a CPU (default: '
        f'config.cpu_devices, else {distributed.DEFAULT_CPU_DEVICES}).'))


@functools.lru_cache(maxsize=None)
def _define(name: str) -> flags.FlagHolder:
  define, help_text = _SHARED_FLAGS[name]
  return define(name, None, help_text)


def define_shared_flags(*names: str) -> tuple[flags.FlagHolder, ...]:
  """The flags `names` of `_SHARED_FLAGS` (--checkpoint, --cpu_devices, ...)."""
  holders = tuple(_define(name) for name in names)
  for name in names:  # each command's own, with two in one process (tests)
    flags.declare_key_flag(name)
  return holders


def _quiet_libraries(record) -> bool:
  """Hides libraries' INFO records and orbax's warnings below --verbosity=1."""
  ours = os.path.realpath(record.pathname).startswith(_OURS)
  if ours or logging.get_verbosity() > logging.INFO:
    return True
  if '/orbax/' in record.pathname or record.name == 'asyncio':  # background
    return record.levelno >= python_logging.ERROR and not record.exc_info
  return record.levelno >= python_logging.WARNING


def quiet_libraries() -> None:
  """What a command prints is its own: see `_quiet_libraries`."""
  handler = logging.get_absl_handler()
  if _quiet_libraries not in handler.filters:
    handler.addFilter(_quiet_libraries)
