"""Code and text completion for the server and ``edgespec complete``.

``session`` (one loaded pair serving text, fill-in-the-middle and chat requests),
``fim`` (FIM prompts from a model's own tokens), ``codestop`` (where a code
completion stops).
"""
