"""llama.cpp's log: kept quiet, its recent warnings and errors kept to explain a failure."""

from __future__ import annotations

import ctypes
import re

from .bindings import ll

# enum ggml_log_level of this build's ggml.h (llama_cpp/_logger.py's comment shows an
# older order, where 4 was DEBUG): NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5.
GGML_LOG_WARN, GGML_LOG_ERROR, GGML_LOG_CONT = 3, 4, 5

#: Recent (level, text) warnings and errors from llama.cpp, to explain a failure.
_log_tail: list[tuple[int, str]] = []
_last_level = 0


@ll.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # Keep llama.cpp quiet, but remember recent warnings/errors to explain a failure.
    global _last_level
    line = text.decode("utf-8", "replace")
    if level == GGML_LOG_CONT:  # the rest of the previous message
        if _last_level in (GGML_LOG_WARN, GGML_LOG_ERROR) and _log_tail:
            _log_tail[-1] = (_log_tail[-1][0], _log_tail[-1][1] + line)
        return
    _last_level = level
    if level in (GGML_LOG_WARN, GGML_LOG_ERROR):
        _log_tail.append((level, line))
        del _log_tail[:-16]


#: llama.cpp's error lines that only say that something failed, not why.
_GENERIC = re.compile(r"failed to (load model|initialize the context)\W*$|^error loading model\W*$")


def _failure_reason(default: str) -> str:
    """llama.cpp's own reason for the failure just logged: its first telling error line
    (else its last warning, else ``default``), without the function-name prefixes."""

    def clean(text: str) -> str:
        text = " ".join(text.split())
        text = re.sub(r"^(\w+: )+", "", text)  # "llama_model_load: " and the like
        return re.sub(r"^error loading model: ", "", text)

    errors = [clean(t) for lv, t in _log_tail if lv == GGML_LOG_ERROR]
    telling = [e for e in errors if e and not _GENERIC.search(e)]
    if telling:
        return telling[0]
    warnings = [clean(t) for lv, t in _log_tail if lv == GGML_LOG_WARN]
    return next((w for w in reversed(warnings) if w), errors[0] if errors else default)


ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
ll.llama_backend_init()
