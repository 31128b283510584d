"""The study ViT's train step timed, and markdown tables, for the benchmark scripts."""

from collections.abc import Iterable


def measure(cpu_devices: int, **options) -> dict:
  """`step_benchmark.run_benchmark` of the study's ViT step on `cpu_devices`."""
  # Imported here, not above: the scripts set XLA_FLAGS and jax's options
  # before jax starts.
  from vit_jax.runtime import distributed  # pylint: disable=g-import-not-at-top
  distributed.set_cpu_devices(cpu_devices)
  from vit_jax.training import step_benchmark  # pylint: disable=g-import-not-at-top
  return step_benchmark.run_benchmark(model='ViT-Tiny-CIFAR_4', batch_size=128,
                                      image_size=32, augment=True, **options)


def print_table(header: Iterable[str], rows: Iterable[Iterable[str]]):
  """A markdown table, the columns after the first right-aligned."""
  header = list(header)
  print('| ' + ' | '.join(header) + ' |')
  print('| --- |' + ' ---: |' * (len(header) - 1))
  for row in rows:
    print('| ' + ' | '.join(row) + ' |', flush=True)
