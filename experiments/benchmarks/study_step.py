"""What the benchmark scripts share: the study ViT's train step timed by
`vit_jax.benchmark`, and the markdown tables they print."""

from collections.abc import Iterable


def measure(cpu_devices: int, **options) -> dict:
  """`vit_jax.training.step_benchmark.run_benchmark` of the study's ViT train step
  (ViT-Tiny-CIFAR_4, batch 128, 32x32, augmented) on `cpu_devices` host
  devices, with run_benchmark's other `options`."""
  # Imported here, not above: the scripts set XLA_FLAGS and jax's options
  # before jax starts.
  from vit_jax.runtime import distributed  # pylint: disable=g-import-not-at-top
  distributed.set_cpu_devices(cpu_devices)
  from vit_jax.training import step_benchmark  # pylint: disable=g-import-not-at-top
  return step_benchmark.run_benchmark(
      model='ViT-Tiny-CIFAR_4', batch_size=128, image_size=32, augment=True,
      **options)


def print_table(header: Iterable[str], rows: Iterable[Iterable[str]]):
  """A markdown table, its first column text and the others numbers
  (right-aligned); each row printed as `rows` yields it."""
  header = list(header)
  print('| ' + ' | '.join(header) + ' |')
  print('| --- |' + ' ---: |' * (len(header) - 1))
  for row in rows:
    print('| ' + ' | '.join(row) + ' |', flush=True)
