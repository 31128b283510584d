"""The ViT's layers, each a small typed linen module or the function that
makes one in its caller; the options for training on little data sit in
the layer they change:

- `patch_embedding`: images to patch tokens: the official linear
  projection, or shifted patch tokenization.
- `position`: the learned position embedding, or the fixed 2-D sine-cosine
  one.
- `attention`: multi-head self-attention, one parameter tree and several
  implementations; locality self-attention and mimetic initialisation.
- `fused_attention`: cuDNN's fused kernel at any token count, and where it
  runs.
- `mlp`: the Transformer's MLP block.
- `dropout`: dropout with hash masks, and drop-path (stochastic depth).
- `encoder_block`: the pre-LayerNorm block of attention and MLP.
- `pooling`: what the classifier reads: [CLS], the mean, or a MAP head.
- `initializers`: PyTorch's defaults, for modules first trained there.
"""
