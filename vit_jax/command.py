"""What every command does with its flags and its log: a --config file that
cannot be loaded is one `error:` line (`parse_flags`, for the commands that
take one), and libraries' INFO records stay out of what it prints
(`quiet_libraries`). Defines no flags, so any command may import it.
"""

import logging as python_logging
import pathlib
import sys
import traceback

from absl import flags
from absl import logging
import ml_collections
from ml_collections import config_flags

from vit_jax import errors


def _config_files(argv: list[str]) -> set[str]:
  """The resolved paths the --config flags of `argv` name."""
  values = [arg.split('=', 1)[1] for arg in argv if arg.startswith('--config=')]
  values += [after for arg, after in zip(argv, argv[1:]) if arg == '--config']
  return {str(pathlib.Path(value.split(':')[0]).resolve()) for value in values}


def _config_file_problem(error: BaseException, argv: list[str]) -> str | None:
  """What is wrong with the --config file, if `error` (raised while the
  flags were parsed) came from loading it: missing, not Python, or raising
  (ml_collections wraps what it raised, and the innermost traceback runs
  through the file); None for another error."""
  files = _config_files(argv)
  innermost = error
  while innermost.__cause__ or innermost.__context__:
    innermost = innermost.__cause__ or innermost.__context__
  if 'Failed loading config file' in str(error):
    return 'no file ' + ', '.join(sorted(files))
  if (isinstance(innermost, SyntaxError) and innermost.filename and
      str(pathlib.Path(innermost.filename).resolve()) in files):
    return (f'{innermost.filename}, line {innermost.lineno}: '
            f'{innermost.msg}; fix the file.')
  frames = [frame for frame in traceback.extract_tb(innermost.__traceback__)
            if str(pathlib.Path(frame.filename).resolve()) in files]
  if not frames:
    return None
  if isinstance(innermost, ValueError):  # the file's own refusal
    return str(innermost)
  return (f'{frames[-1].filename}, line {frames[-1].lineno}: '
          f'{errors.first_line(innermost)}')


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing for a command; a bad flag, or a --config file
  that is missing, is not Python or raises, is one `error:` line and exit
  status 1 instead of a traceback, with or without --config.FIELD
  overrides. An override of a field the config lacks,
  `--config.num_epoch=3`, is accepted here and named by the config schema
  or the model."""
  try:
    remaining = flags.FLAGS(argv)
  except Exception as e:  # pylint: disable=broad-except
    # ml_collections lets whatever loading the file raised through.
    problem = _config_file_problem(e, argv)
    if problem is not None:
      sys.exit(f'error: --config cannot be loaded: {problem}')
    if not isinstance(e, flags.Error):
      raise
    sys.exit(f'error: {e}\nPass --helpshort or --helpfull to see help on '
             'flags.')
  # A config file that is missing, without overrides, stands in as an
  # object that raises when used, not as a ConfigDict.
  config = flags.FLAGS['config'].value if 'config' in flags.FLAGS else None
  if config is not None and not isinstance(config, ml_collections.ConfigDict):
    sys.exit('error: --config cannot be loaded: no file '
             f'{config_flags.get_config_filename(flags.FLAGS["config"])}')
  return remaining


def _quiet_libraries(record) -> bool:
  """Orbax's INFO records (every step of every save and read: registries,
  handlers, throughputs, tens of lines a checkpoint) left out of a
  command's log; a failed save's traceback, logged by every background
  thread involved, too: the command reports it once, in one line. All of
  them shown with --verbosity=1 or more."""
  background = '/orbax/' in record.pathname or record.name == 'asyncio'
  if not background or logging.get_verbosity() > logging.INFO:
    return True
  return (record.levelno >= python_logging.WARNING and
          not (record.levelno >= python_logging.ERROR and record.exc_info))


def quiet_libraries() -> None:
  """What a command prints is its own: see `_quiet_libraries`."""
  handler = logging.get_absl_handler()
  if _quiet_libraries not in handler.filters:
    handler.addFilter(_quiet_libraries)
