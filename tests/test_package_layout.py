"""The package's shape: no import circle, a top level read at a glance."""

import ast
import graphlib
import importlib
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'vit_jax'
MAX_FUNCTION_LINES = 80
# The run, which reads top to bottom in one function, as flax's
# train_and_evaluate does.
TOP_TO_BOTTOM = {'vit_jax.training.train._train_and_evaluate'}


def _module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
  return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob('*.py'))}


def _imports(name: str) -> set[str]:
  """The vit_jax modules `name` imports: `from package import module` counts
  the module, `from package import name` the package's `__init__`."""
  found = set()
  for node in ast.walk(ast.parse(MODULES[name].read_text())):
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      for alias in node.names:
        submodule = f'{node.module}.{alias.name}'
        found.add(submodule if submodule in MODULES else node.module)
  return {module for module in found if module in MODULES} - {name}


def test_no_import_circle_among_the_modules():
  graph = {name: _imports(name) for name in MODULES}
  try:
    tuple(graphlib.TopologicalSorter(graph).static_order())
  except graphlib.CycleError as e:
    pytest.fail('import circle: ' + ' -> '.join(e.args[1]))


def test_the_errors_a_user_sees_come_from_one_leaf_module():
  assert _imports('vit_jax.errors') == set()


def test_the_top_level_holds_the_commands_and_few_else():
  """The commands a user types and shared modules; the rest in role packages."""
  top = sorted(p.name for p in PACKAGE.glob('*.py'))
  assert len(top) <= 12, top


def test_no_function_is_over_80_lines():
  long = []
  for name, path in MODULES.items():
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        lines = node.end_lineno - node.lineno + 1
        if (lines > MAX_FUNCTION_LINES and
            f'{name}.{node.name}' not in TOP_TO_BOTTOM):
          long.append(f'{name}.{node.name}: {lines} lines')
  assert not long, long


# What scripts import, from its package: each name where the package's
# docstring says it is.
PACKAGE_API = [
    ('vit_jax.models', 'create_model', 'vit_jax.models.registry'),
    ('vit_jax.models', 'attention_weights', 'vit_jax.models.vit'),
    ('vit_jax.checkpoints', 'load_run', 'vit_jax.checkpoints.reading'),
    ('vit_jax.checkpoints', 'load', 'vit_jax.checkpoints.reading'),
    ('vit_jax.checkpoints', 'load_params', 'vit_jax.checkpoints.reading'),
    ('vit_jax.checkpoints', 'convert', 'vit_jax.checkpoints.export'),
    ('vit_jax.training', 'train_and_evaluate', 'vit_jax.training.train'),
]


@pytest.mark.parametrize('package,name,module', PACKAGE_API)
def test_the_python_api_is_imported_from_its_package(package, name, module):
  found = getattr(importlib.import_module(package), name)
  assert found is getattr(importlib.import_module(module), name)
