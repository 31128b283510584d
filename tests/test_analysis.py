"""`vit_jax.analysis`: the measures under the names users' scripts import."""

import inspect
import subprocess
import sys

from tests.helpers import ROOT
from vit_jax import analysis
from vit_jax.analysis import measures


def test_every_measure_is_the_packages_own_name_imported_alone():
  """Importing the measures loads neither matplotlib nor jax."""
  public = {
      name
      for name, function in inspect.getmembers(measures, inspect.isfunction)
      if function.__module__ == measures.__name__ and not name.startswith('_')
  }
  assert public == set(analysis.__all__)
  assert all(
      getattr(analysis, name) is getattr(measures, name) for name in public)
  loaded = subprocess.run([
      sys.executable, '-c', 'import sys; from vit_jax import analysis; '
      "print(sorted({'jax', 'matplotlib'} & set(sys.modules)))"
  ], cwd=ROOT, capture_output=True, text=True, check=True).stdout
  assert loaded.strip() == '[]'
