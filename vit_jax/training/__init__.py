"""The training loop and what it runs: `train_and_evaluate(config,
workdir)` (`train.py`) is where a run starts.

  train.py              the loop, counted in steps: log, evaluate,
                        checkpoint, resume
  plan.py               the run in steps: its length, warmup and the
                        intervals of logs, evaluations and checkpoints
  startup.py            what a run builds before its loop: the workdir
                        checked, input, model, objective, compiled steps,
                        the state restored or made
  steps.py              where the steps are compiled: the train state, the
                        train and eval steps
  dispatch.py           train steps handed to the devices several to a call,
                        at most two calls in flight
  optimizer.py          the learning-rate schedule and the optimizer
  evaluation.py         loss, top-1 and top-5 over a whole test split: in
                        training, and a checkpoint's
  finetune.py           config.init_from read, checked before the data,
                        fitted to the model (the paper's optimizer recipe:
                        configs/finetune.py)
  metric_writer.py      metrics.jsonl and TensorBoard events
  progress.py           images/s, FLOP/s and the ETA in the log
  flops.py              a model's FLOPs from its program; accelerators' peaks
  compilation_cache.py  jax's persistent compilation cache, on for every run
  step_benchmark.py     the train and eval steps timed (`vit_jax.benchmark`)
"""


def __getattr__(name: str):
  # The loop imports nearly every package; importing it only when asked for
  # lets the modules here be imported alone (config_schema needs one).
  if name == 'train_and_evaluate':
    from vit_jax.training import train  # pylint: disable=g-import-not-at-top
    return train.train_and_evaluate
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
