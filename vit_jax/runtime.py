"""Process-level set-up that must happen before JAX creates its backends."""

import os

import jax

# On a CPU, XLA runs the small matmuls of a small model with little
# parallelism; splitting the batch over a few host devices runs the shards
# side by side (ViT-Tiny train step, 2 cores: 93 img/s on 1 device, 123 on 4;
# experiments/benchmarks/README.md). Other platforms are unaffected.
DEFAULT_CPU_DEVICES = 4


def set_cpu_devices(count: int | None = None):
  """Makes the CPU backend expose `count` devices (default: 4).

  Leaves an explicit `--xla_force_host_platform_device_count` in XLA_FLAGS
  alone. Call before anything asks JAX for its devices.
  """
  if 'xla_force_host_platform_device_count' in os.environ.get('XLA_FLAGS', ''):
    return
  jax.config.update('jax_num_cpu_devices', count or DEFAULT_CPU_DEVICES)
