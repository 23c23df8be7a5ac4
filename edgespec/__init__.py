"""edgespec: exact speculative decoding for GGUF models on your own machine."""

__version__ = "0.1.0"
