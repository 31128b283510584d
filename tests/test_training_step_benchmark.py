"""The timed steps, importable beside any other command's flags."""

from absl import flags

from vit_jax import analyze  # pylint: disable=unused-import
from vit_jax import benchmark_input  # pylint: disable=unused-import
from vit_jax.training import step_benchmark


def test_it_defines_no_flags_so_it_imports_beside_every_command():
  """Nor does benchmark_input until it runs: both import beside analyze's."""
  assert not {'vit_jax.training.step_benchmark', 'vit_jax.benchmark_input'
             } & set(flags.FLAGS.flags_by_module_dict())
  assert not {'model', 'batch_size'} & vars(step_benchmark).keys()


def test_the_table_formats_rates_and_shares():
  assert step_benchmark.format_table({
      'model': 'ViT-Ti_16', 'train_images_per_second': 1234.5,
      'train_utilization': 0.4567, 'train_ms_per_step': 3.25
  }) == ('model                    ViT-Ti_16\n'
         'train_images_per_second  1,234.5\n'
         'train_utilization        45.7%\n'
         'train_ms_per_step        3.250')
