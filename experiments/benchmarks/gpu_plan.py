"""What `gpu.py` measures, at which sizes, and in how much time: the H100
plan, and the same rows at tiny sizes for the CPU (`--smoke`)."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Plan:
  # The train-step rows: our ViTs (the label tables show, the registered
  # model), the summary's first, so that a spent budget cuts the others; in
  # bfloat16, without augmentation (timm's step has none), each contender
  # timed for `steps` steps a round over `rounds` alternating rounds.
  models: tuple[tuple[str, str], ...]
  image_size: int
  batch_size: int
  num_classes: int
  model_overrides: dict  # what shrinks every model of --smoke
  steps: int
  rounds: int
  matmul_size: int  # the side of the square bf16 matmul timed as a ceiling
  # The study: `python -m vit_jax.main --config=configs/cifar_small.py`
  # with these overrides.
  study_overrides: dict
  # `vit_jax.benchmark_input` on a folder of synthetic JPEGs of `jpeg_size`.
  input_image_size: int
  input_batch_size: int
  input_steps: int
  input_rounds: int
  jpeg_size: tuple[int, int]
  # The largest batch of each (label, registered model, first batch tried)
  # with LARGE_MODEL_OVERRIDES, searched up to `largest_batch_cap`; each
  # batch that fits is timed for `search_steps` steps.
  large_models: tuple[tuple[str, str, int], ...]
  largest_batch_cap: int
  search_steps: int
  # Each section's seconds, in the order they run: a section ends by the
  # sum of its own and the earlier ones' from the start, so that one that
  # runs late shortens the next rather than the run going over.
  budgets: tuple[tuple[str, float], ...]


SECTIONS = ('study', 'input', 'train step', 'largest batch')
LARGE_MODEL_OVERRIDES = {'remat': 'full', 'scan': True}
B16 = 'ViT-B/16'  # the summary's model
VIT_MODELS = ((B16, 'ViT-B_16'), ('ViT-S/16', 'ViT-S_16'),
              ('ViT-Ti/16', 'ViT-Ti_16'))
LARGE_MODELS = ('ViT-L/16', 'ViT-L_16'), ('ViT-H/14', 'ViT-H_14')

# One H100 in under 9 minutes: 510 s of sections, the rest for starting
# and for the last step of a section that runs over.
H100 = Plan(
    models=VIT_MODELS, image_size=224, batch_size=256, num_classes=1000,
    model_overrides={}, steps=10, rounds=3, matmul_size=8192,
    study_overrides={},
    input_image_size=224, input_batch_size=256, input_steps=10,
    input_rounds=2, jpeg_size=(500, 375),
    large_models=tuple((label, name, first) for (label, name), first
                       in zip(LARGE_MODELS, (128, 64))),
    largest_batch_cap=65536, search_steps=2,
    budgets=(('study', 100), ('input', 40), ('train step', 250),
             ('largest batch', 120)))

_ONE_LAYER = dict(num_layers=1, hidden_size=32, num_heads=2, mlp_dim=64)

# The same code paths on the CPU in under a minute: one model, of one
# layer, at 112 px (whole patches of 16 and of 14); the study's config for 2
# steps of a small synthetic CIFAR-10 on one device, its ViT of one layer.
SMOKE = Plan(
    models=VIT_MODELS[:1], image_size=112, batch_size=8, num_classes=10,
    model_overrides=_ONE_LAYER, steps=2, rounds=2, matmul_size=256,
    study_overrides=dict(
        total_steps=2, warmup_steps=1, batch_size=16, eval_batch_size=16,
        train_examples_per_file=0, test_examples=0, cpu_devices=1,
        **{f'model_overrides.{k}': v for k, v in _ONE_LAYER.items()}),
    input_image_size=32, input_batch_size=4, input_steps=2, input_rounds=1,
    jpeg_size=(40, 30),
    large_models=tuple((label, name, 4) for label, name in LARGE_MODELS),
    largest_batch_cap=8, search_steps=1,
    budgets=tuple((section, 300) for section in SECTIONS))
