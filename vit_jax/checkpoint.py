"""Where state is saved: our training runs' checkpoints, and reading them back.

`RunCheckpoints` (`run_checkpoints`) is where the training loop saves and
restores its state: `workdir/checkpoints/<step>/`. `load_run` reads a
`vit_jax.main` workdir for analysis, fine-tuning and distillation, verified
as the loop verifies what it resumes; `load_params` takes a workdir or a
released `.npz`. A workdir's record of its run is its config.json, and a
copy in each checkpoint, from which a lost config.json is rebuilt
(`saved_config`). Other formats are `vit_jax.formats`'; their `load_npz`,
`save_npz`, `check_params` and `param_shapes` are also importable from here.
"""

import dataclasses
import json
import pathlib
from typing import Any

from absl import logging
import jax
import ml_collections

from vit_jax import files
from vit_jax import run_checkpoints
from vit_jax.errors import CheckpointError
from vit_jax.errors import WorkdirError
from vit_jax.formats import npz
from vit_jax.formats import params as params_lib

# The released format's readers and writer, and the fit check, where users'
# scripts have always found them.
load_npz = npz.load_npz
save_npz = npz.save_npz
check_params = params_lib.check_params
param_shapes = params_lib.param_shapes
# Where the training loop has always found them.
RunCheckpoints = run_checkpoints.RunCheckpoints


@dataclasses.dataclass(frozen=True)
class Run:
  config: ml_collections.ConfigDict
  params: Any
  batch_stats: Any  # {} for models without BatchNorm
  step: int

  @property
  def variables(self) -> dict:
    if self.batch_stats:
      return {'params': self.params, 'batch_stats': self.batch_stats}
    return {'params': self.params}


def read_config_json(workdir: pathlib.Path) -> tuple[dict | None, str]:
  """`workdir`'s config.json, or None and what is wrong with it ('is
  missing', 'is not valid JSON (...)')."""
  config_file = pathlib.Path(workdir) / 'config.json'
  try:
    return json.loads(config_file.read_text()), ''
  except FileNotFoundError:
    return None, 'is missing'
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    return None, f'is not valid JSON ({e})'
  except OSError as e:
    return None, f'cannot be read ({e.strerror or e})'


def saved_config(workdir: pathlib.Path) -> dict:
  """The config of the run whose checkpoints `workdir` holds: its
  config.json, or, when that is missing or unreadable, the config its
  newest checkpoint saved, written back to config.json (one warning says
  so). WorkdirError when neither exists: nothing then says which config
  the checkpoints are of."""
  saved, problem = read_config_json(workdir)
  if saved is not None:
    return saved
  config_file, checkpoints = workdir / 'config.json', workdir / 'checkpoints'
  with RunCheckpoints(checkpoints) as reader:
    found = reader.latest_config()
  if found is None:
    raise WorkdirError(
        f'{config_file} {problem}, and the checkpoints in {checkpoints} were '
        'saved before checkpoints held their config: nothing says which '
        'config they are of, so no run can resume them. Pass a new '
        f'--workdir, or move {checkpoints} away to start afresh here.')
  step, saved = found
  logging.warning('%s %s: rebuilt from the config saved with checkpoint %s.',
                  config_file, problem, checkpoints / str(step))
  if jax.process_index() == 0:
    files.write_atomically(config_file, json.dumps(saved, indent=2))
  return saved


def load_run(workdir: str | pathlib.Path, step: int | None = None) -> Run:
  """The config and the model variables of a `vit_jax.main` workdir.

  Reads the checkpoint of `step`, or the newest that matches its digest
  (the trainer's fallback: a damaged one is skipped with a warning), onto
  this process's first device, whatever devices the run was trained on;
  CheckpointError for a step that cannot be restored. The config is
  config.json's, or, when that is lost, the checkpoint's.
  """
  workdir = pathlib.Path(workdir)
  with RunCheckpoints(workdir / 'checkpoints') as checkpoints:
    if not checkpoints.steps():
      if not (workdir / 'config.json').exists():
        raise CheckpointError(f'{workdir} has no config.json nor checkpoints: '
                              'pass the --workdir of a run of `python -m '
                              'vit_jax.main`.')
      raise CheckpointError(f'{workdir / "checkpoints"} holds no checkpoint '
                            'yet; train until the first one is saved.')
    restored = (checkpoints.restore_latest() if step is None else
                checkpoints.restore(step))
  config, problem = read_config_json(workdir)
  if config is None:
    if restored.config is None:
      raise CheckpointError(
          f'{workdir / "config.json"} {problem}, and the checkpoints in '
          f'{checkpoints.directory} were saved before checkpoints held their '
          "config: nothing says which model they are. Put back the run's "
          'config.json.')
    logging.warning('%s %s: reading the config saved with checkpoint %s.',
                    workdir / 'config.json', problem,
                    checkpoints.directory / str(restored.step))
    config = restored.config
  # The optimizer state, needed to verify the checkpoint, stays behind.
  device = jax.local_devices()[0]
  return Run(ml_collections.ConfigDict(config),
             jax.device_put(restored.state['params'], device),
             jax.device_put(restored.state.get('batch_stats') or {}, device),
             restored.step)


def load_params(path_or_workdir: str | pathlib.Path,
                step: int | None = None) -> Any:
  """Parameters from a released `.npz` file or a `vit_jax.main` workdir.

  A workdir gives its checkpoint of `step` (default: the latest) as arrays on
  the first device, a `.npz` gives numpy arrays; both in our tree.
  """
  path = pathlib.Path(path_or_workdir)
  if path.is_dir():
    return load_run(path, step).params
  if step is not None:
    raise CheckpointError(f'{path} is one .npz checkpoint; step={step} only '
                          'selects among the checkpoints of a run directory.')
  return npz.load_npz(path)


