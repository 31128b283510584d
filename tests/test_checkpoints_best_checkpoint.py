"""The state of a run's best evaluation, kept beside its checkpoints:
saved by the loop, read back, and the same after a resumption."""

import pathlib
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp

from tests.helpers import tiny_config
from vit_jax.checkpoints import best_checkpoint
from vit_jax.checkpoints import reading
from vit_jax.checkpoints import run_checkpoints
from vit_jax.training import train


def _params_of(workdir, step):
  with ocp.CheckpointManager(pathlib.Path(workdir) / 'checkpoints') as manager:
    return manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore())).state['params']


def _best_checkpoint_steps(workdir):
  return run_checkpoints.RunCheckpoints(
      workdir / best_checkpoint.DIRECTORY).steps()


def test_the_best_evaluation_is_kept_and_a_resumed_run_keeps_the_same(
    cifar10_binary, tmp_path):
  data_dir, _ = cifar10_binary
  # Every other step evaluated and checkpointed, all checkpoints kept: the
  # best one's state is also in checkpoints/.
  config = tiny_config(data_dir, total_steps=12, eval_every_steps=2,
                       checkpoint_every_steps=2, keep_checkpoints=6,
                       keep_best_checkpoint=True)
  summary = train.train_and_evaluate(config, tmp_path / 'whole')
  best = summary['best_step']
  assert _best_checkpoint_steps(tmp_path / 'whole') == [best]
  run = reading.load_run(tmp_path / 'whole', best=True)
  assert run.step == best
  jax.tree.map(np.testing.assert_array_equal, run.params,
               _params_of(tmp_path / 'whole', best))
  # As if killed after saving the best, before the checkpoint that follows
  # it: the best is ahead of where the run resumes, and is saved again.
  assert best > 2
  shutil.copytree(tmp_path / 'whole', tmp_path / 'resumed')
  for step in range(best, 13, 2):
    shutil.rmtree(tmp_path / 'resumed' / 'checkpoints' / str(step))
  resumed = train.train_and_evaluate(config, tmp_path / 'resumed')
  assert resumed['best_step'] == best
  assert _best_checkpoint_steps(tmp_path / 'resumed') == [best]
  jax.tree.map(np.testing.assert_array_equal,
               reading.load_run(tmp_path / 'resumed', best=True).params,
               run.params)
