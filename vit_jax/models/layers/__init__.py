"""The ViT's layers, each with the small-data options that change it."""
