"""The training loop and what it runs; a run starts at `train_and_evaluate`.

  train.py              the run top to bottom: build, restore, loop, summary
  plan.py               the run in steps: length, warmup, intervals
  startup.py            the workdir held; the model and objective; the run recorded
  steps.py              the train state and the compiled train and eval steps
  dispatch.py           train steps handed to the devices several to a call
  optimizer.py          the learning-rate schedule and the optimizer
  evaluation.py         loss, top-1 and top-5 over a whole test split
  finetune.py           config.init_from read, checked and fitted to the model
  metric_writer.py      metrics.jsonl and TensorBoard events
  provenance.py         where results come from: commit, machine, date
  progress.py           images/s, FLOP/s and the ETA in the log
  flops.py              a model's FLOPs from its program; accelerators' peaks
  compilation_cache.py  jax's persistent compilation cache
  step_benchmark.py     the train and eval steps timed (`vit_jax.benchmark`)"""


def __getattr__(name: str):
  # Lazy: the loop imports nearly every package, and config_schema imports
  # compilation_cache alone.
  if name == 'train_and_evaluate':
    from vit_jax.training import train  # pylint: disable=g-import-not-at-top
    return train.train_and_evaluate
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
