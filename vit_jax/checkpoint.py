"""Reading a training run back: its config and a checkpoint's variables."""

import dataclasses
import json
import pathlib
from typing import Any

import jax
import ml_collections
import orbax.checkpoint as ocp


class CheckpointError(ValueError):
  """The directory holds no usable run or checkpoint."""


@dataclasses.dataclass(frozen=True)
class Run:
  config: ml_collections.ConfigDict
  params: Any
  batch_stats: Any  # {} for models without BatchNorm
  epoch: int

  @property
  def variables(self) -> dict:
    if self.batch_stats:
      return {'params': self.params, 'batch_stats': self.batch_stats}
    return {'params': self.params}


def load_run(workdir: str | pathlib.Path, epoch: int | None = None) -> Run:
  """The config and the model variables of a `vit_jax.main` workdir.

  Reads the checkpoint of `epoch` (default: the latest) onto this process's
  first device, whatever devices the run was trained on.
  """
  workdir = pathlib.Path(workdir)
  config_file = workdir / 'config.json'
  if not config_file.exists():
    raise CheckpointError(f'{workdir} has no config.json: pass the --workdir '
                          'of a run of `python -m vit_jax.main`.')
  config = ml_collections.ConfigDict(json.loads(config_file.read_text()))
  manager = ocp.CheckpointManager(
      (workdir / 'checkpoints').absolute(),
      item_handlers={'state': ocp.StandardCheckpointHandler()})
  with manager:
    epochs = manager.all_steps()
    if not epochs:
      raise CheckpointError(f'{workdir / "checkpoints"} holds no checkpoint '
                            'yet; train at least one epoch.')
    epoch = max(epochs) if epoch is None else epoch
    if epoch not in epochs:
      raise CheckpointError(f'No checkpoint of epoch {epoch} in {workdir}; '
                            f'there are {sorted(epochs)}.')
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                          sharding=device),
        manager.item_metadata(epoch)['state'])
    state = manager.restore(
        epoch,
        args=ocp.args.Composite(state=ocp.args.StandardRestore(target))).state
  return Run(config, state['params'], state.get('batch_stats') or {}, epoch)
