"""Host-device set-up before JAX starts."""

import os
import subprocess
import sys

_COUNT_DEVICES = ('from vit_jax import runtime; runtime.set_cpu_devices({}); '
                  'import jax; print(jax.device_count())')


def _device_count(count, xla_flags=''):
  env = {**os.environ, 'XLA_FLAGS': xla_flags, 'JAX_PLATFORMS': 'cpu'}
  out = subprocess.run([sys.executable, '-c', _COUNT_DEVICES.format(count)],
                       env=env, capture_output=True, text=True, check=True)
  return int(out.stdout.split()[-1])


def test_sets_the_cpu_device_count():
  assert _device_count(3) == 3
  assert _device_count(None) == 4


def test_leaves_an_explicit_xla_flag_alone():
  assert _device_count(3, '--xla_force_host_platform_device_count=2') == 2
