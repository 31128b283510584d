"""The errors a user sees as one `error:` line; others keep their traceback."""

import errno
import os


class VitJaxError(ValueError):
  """A problem the message explains, in the user's config, data or files."""


class ConfigError(VitJaxError):
  """The configuration cannot be run as it is."""


class DatasetError(VitJaxError):
  """The dataset is missing, malformed or misconfigured."""


class CheckpointError(VitJaxError):
  """The path holds no usable run or checkpoint, or it does not fit a model."""


class WorkdirError(VitJaxError):
  """The workdir cannot hold this run."""


class DistributedError(VitJaxError):
  """The multi-process set-up is incomplete, inconsistent or failed."""


class TrainingDivergedError(VitJaxError):
  """A logged loss stopped being finite."""


class AnalysisError(VitJaxError):
  """The run or checkpoint cannot be analyzed as asked."""


def first_line(error: BaseException, limit: int = 300) -> str:
  """`Type: first line of the message`, cut at `limit` characters."""
  text = str(error).strip().splitlines()
  line = f'{type(error).__name__}: {text[0] if text else ""}'
  return line if len(line) <= limit else line[:limit - 3] + '...'


def causes(error: BaseException | None):
  """`error`, then each error it arose from, down to the first."""
  while error is not None:
    yield error
    error = error.__cause__ or error.__context__


def out_of_space(error: BaseException | None) -> bool:
  """Whether `error` or one it arose from says the disk or quota is full."""
  return any(
      (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)) or
      any(s in str(e) for s in ('No space left', 'RESOURCE_EXHAUSTED',
                                'Disk quota exceeded')) for e in causes(error))


def write_failed(path, error: BaseException, kept: str,
                 elsewhere: str | None = None) -> str:
  """The line for a failed write to `path`: what failed, is `kept`, the fix."""
  # `found`: the folder nearest `path` that exists, or a file in its way.
  where = found = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(found):
    found = os.path.dirname(found)
  fix = (f'Free space there (df -h {where})'
         if out_of_space(error) else f'{found} is a file, not a folder: move it'
         if os.path.isfile(found) else f'Check that {where} is writable')
  if elsewhere:
    fix += f', or pass {elsewhere}'
  return f'Writing {path} failed ({first_line(error)}); {kept}. {fix}.'


def exit_on_user_error(command, also: tuple[type[BaseException], ...] = ()):
  """`command()`; a `VitJaxError` (or `also`) exits 1 with one `error:` line."""
  try:
    return command()
  except (VitJaxError, *also) as e:
    raise SystemExit(f'error: {e}') from None
