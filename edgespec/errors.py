"""The few exception types edgespec raises on purpose.

Every one of them carries a one-line message meant for a person; the CLI prints
it as ``edgespec: error: <message>`` and exits non-zero, without a traceback.
"""


def one_line(text: str) -> str:
    """text with its control characters escaped (a newline in a file name is shown as
    \\n), so a message quoting user input stays on one line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


class EdgespecError(Exception):
    """Base class: a failure with a message fit to show a user as it is."""


class ModelLoadError(EdgespecError):
    """A model file is missing, not a GGUF, truncated, or llama.cpp refused it."""


class IncompatibleModelsError(EdgespecError):
    """Draft and target cannot share token ids (different vocabularies)."""


class InvalidParameterError(EdgespecError):
    """A generation or sampling parameter is out of its valid range."""


class ContextFullError(EdgespecError):
    """The prompt (or the conversation) does not fit the context window."""


class ModelFetchError(EdgespecError):
    """A model could not be fetched, verified or put into place."""


class BackendError(EdgespecError):
    """llama.cpp reported a failure while decoding or editing the KV cache."""


class RpcWorkerLost(BackendError):
    """An RPC worker holding the target's layers died: that target is gone until the
    process starts again (the KV cache and the layers on the worker are lost)."""


class CatalogError(EdgespecError):
    """The model catalog (models/catalog.toml or $EDGESPEC_CATALOG) is malformed."""
