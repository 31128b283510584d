"""What `gpu.py` measures, at which sizes, in what time (`--smoke`: tiny)."""

import dataclasses

# timm's step as a PyTorch user runs it at its best
# (`timm_worker.train_step`'s `compiled`): the whole step compiled, or the
# model compiled beside AdamW's fused kernel.
TIMM_MODES = {'torch.compile': 'step', 'compiled model, fused AdamW': 'model'}
# The models' labels in the tables; ViT-B/16's is the summary's.
B16, L16, TI16 = 'ViT-B/16', 'ViT-L/16', 'ViT-Ti/16'
VIT_MODELS = ((B16, 'ViT-B_16', 256), (L16, 'ViT-L_16', 128),
              (TI16, 'ViT-Ti_16', 256))


# A plan of gpu.py's sections; its defaults are `H100`'s.
@dataclasses.dataclass(frozen=True)
class Plan:
  # The train-step rows: our ViTs (the label tables show, the registered
  # model, the batch), the summary's first, so that a spent budget cuts the
  # others; in bfloat16, without augmentation (timm's step has none), each
  # contender timed for `steps` steps a round over `rounds` alternating
  # rounds. Ours with each of `attentions` (model_overrides.attention), the
  # batch found with the first; timm in each of TIMM_MODES on the first
  # model, in the faster of them on the others.
  models: tuple[tuple[str, str, int], ...] = VIT_MODELS
  attentions: tuple[str, ...] = ('einsum', 'auto')
  image_size: int = 224
  num_classes: int = 1000
  # What shrinks every model of --smoke.
  model_overrides: dict = dataclasses.field(default_factory=dict)
  steps: int = 10
  rounds: int = 3
  # The side of the square bf16 matmul timed as a ceiling.
  matmul_size: int = 8192
  # The study: `python -m vit_jax.main --config=configs/cifar_small.py`
  # with these overrides (`gpu_sections.STUDY_RUNS`: with a fresh
  # compilation cache, then with the cache the first run filled).
  study_overrides: dict = dataclasses.field(default_factory=dict)
  # Attention alone, forward and backward, at (batch, tokens, heads,
  # head_dim): the einsum path against the fused kernel with the tokens
  # padded to each of `token_multiples`.
  attention_shape: tuple[int, int, int, int] = (256, 197, 12, 64)
  token_multiples: tuple[int, ...] = (2, 64, 128)
  # jax.profiler traces of `profile_steps` train steps of the first
  # `profile_models` models (attention 'auto'), summed by kind of work.
  profile_models: int = 1
  profile_steps: int = 3
  # `vit_jax.benchmark_input` on a folder of synthetic JPEGs of `jpeg_size`.
  input_image_size: int = 224
  input_batch_size: int = 256
  input_steps: int = 10
  input_rounds: int = 2
  jpeg_size: tuple[int, int] = (500, 375)
  # Each section's (name, seconds), in the order they run: a section ends by
  # the sum of its own and the earlier ones' from the start, so that one that
  # runs late shortens the next rather than the run going over.
  budgets: tuple = (('study', 150), ('train step', 270), ('attention', 15),
                    ('profile', 35), ('input', 35))


# One H100 in under 9 minutes: 505 s of sections, the rest for starting
# and for the last step of a section that runs over. (Measured on an H100,
# 2026-11-28, 546 s in all: the study 69 s cold, 36 s warm, and 30 epochs
# of one step a call, another program to compile, over their 40 s; on
# ViT-B/16 timm's whole-step torch.compile took 66 s of setup, its compiled
# model 27 s, ours 14-19 s an attention; ViT-L/16, ViT-Ti/16 and the input
# did not fit. The profile is of ViT-B/16 alone: a second model's does not
# fit.)
H100 = Plan()

# When little GPU time is left: the ViT-B/16 pair and the study.
QUICK = dataclasses.replace(
    H100, models=VIT_MODELS[:1], profile_models=0,
    budgets=(('study', 150), ('train step', 170), ('attention', 0),
             ('profile', 0), ('input', 0)))

ONE_LAYER = dict(num_layers=1, hidden_size=32, num_heads=2, mlp_dim=64)
# As the study's config overrides (SMOKE's study, timeline.py's --tiny).
ONE_LAYER_OVERRIDES = {f'model_overrides.{k}': v for k, v in ONE_LAYER.items()}

# The same code paths on the CPU in under a minute: one model, of one
# layer, at 112 px (whole patches of 16); the study's config for 2 steps of
# a small synthetic CIFAR-10 on one device, its ViT of one layer.
SMOKE = Plan(
    models=((B16, 'ViT-B_16', 8),), image_size=112, num_classes=10,
    model_overrides=ONE_LAYER, steps=2, rounds=2, matmul_size=256,
    attention_shape=(2, 17, 2, 16), token_multiples=(2, 64), profile_steps=2,
    input_image_size=32, input_batch_size=4, input_steps=2, input_rounds=1,
    jpeg_size=(40, 30), budgets=tuple(
        (section, 300) for section, _ in H100.budgets), study_overrides=dict(
            total_steps=2, warmup_steps=1, batch_size=16, eval_batch_size=16,
            train_examples_per_file=0, test_examples=0, cpu_devices=1,
            **ONE_LAYER_OVERRIDES))
