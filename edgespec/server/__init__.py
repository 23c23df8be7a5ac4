"""A local completion server: OpenAI's /v1 API and llama-server's /infill, /completion,
/tokenize, /detokenize, /props and /metrics, speculatively.

``EdgespecServer(address, session)`` serves one CompletionSession (a target and
its drafter); ``serve(server)`` runs it until interrupted.
"""

from .app import API_KEY_ENV, DEFAULT_MAX_BODY, EdgespecServer, serve

__all__ = ["API_KEY_ENV", "DEFAULT_MAX_BODY", "EdgespecServer", "serve"]
