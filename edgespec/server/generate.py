"""From a parsed request to its answer: a job on a slot, then JSON or a stream.

The handler (edgespec.server.app) has parsed and checked the request and chosen the
protocol's format; this builds the prompt, submits the job to the scheduler (a 429
with Retry-After when its queue is full), and answers as the job's items arrive,
cancelling it when the client goes away.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..completion.session import CodeRules, CompletionRequest, CompletionResult, CompletionSession
from ..errors import EdgespecError
from .errors import ApiError, bad_request, from_exception
from .requests import Options
from .responses import TRUNCATION, Outcome, ResponseFormat
from .slots import PRIORITY_CODE, PRIORITY_OTHER, QueueFull
from .timelimit import TimeLimit
from .transport import JsonHandler

#: What a slot yields before the completion: the prompt's size and how it was built.
Prepared = dict[str, Any]
#: The count of messages --context-overflow truncate-middle dropped (see TRUNCATION)
TRUNCATED_HEADER = "X-Edgespec-Truncated-Messages"
Build = Callable[[], tuple[list[int], CodeRules | None, Prepared]]


def generate(
    handler: JsonHandler,  # edgespec.server.app.Handler (which imports this module)
    build: Build,
    opts: Options,
    param: str,
    fmt: ResponseFormat,
    *,
    code: bool = False,
) -> None:
    """Run a completion on a slot; answer in fmt's protocol (OpenAI's, llama.cpp's).

    The prompt is built here, on the handler's thread, so that the scheduler can give
    it the slot whose cache it continues. code: an editor's completion (it goes first
    in the queue; /infill: a newer one from the same client replaces it).
    """
    metrics = handler.server.metrics
    try:
        tokens, rules, info = build()
        handler.server.session.check_prompt(tokens)
    except EdgespecError as e:
        raise from_exception(e, param) from None
    headers: dict[str, str] = {}
    if "truncated_messages" in info:  # --context-overflow truncate-middle
        headers[TRUNCATED_HEADER] = str(info["truncated_messages"])

    def work(s: CompletionSession, cancelled: Callable[[], bool]):
        yield {"prompt_tokens": len(tokens), "slot": getattr(s.target, "seq_id", 0), **info}
        req = CompletionRequest(
            tokens,
            opts.max_tokens,
            opts.sampling,
            opts.seed,
            opts.stop,
            rules,
            grammar=opts.grammar,
            logprobs=opts.logprobs,
        )
        if not opts.cache_prompt:  # llama-server's cache_prompt false: evaluate it all
            s.target.reset()
        limit = TimeLimit(opts.t_max_predict_ms)
        for item in s.run(req, lambda: cancelled() or limit.reached):
            if isinstance(item, CompletionResult):
                if limit.reached and item.stop == "cancelled" and not cancelled():
                    item = dataclasses.replace(item, stop="time_limit")
                metrics.record_completion(item.stats)
                yield Outcome(item, len(s.target.tokens), getattr(s.target, "seq_id", 0))
            else:
                limit.saw(item)
                yield item

    client = None
    if handler._route == "/infill" and opts.max_tokens != 0:
        # an editor's completion: one per keystroke, only the last counts (a cache
        # warm-up, n_predict 0 as llama.vim's ring updates, neither replaces nor is)
        client = f"{handler.client_address[0]} {handler.headers.get('User-Agent', '')}"
    n_slots = len(handler.server.scheduler.slots)
    if opts.id_slot >= n_slots:
        raise bad_request(
            f"id_slot must be -1 or below {n_slots} (the server has {n_slots} slots)",
            param="id_slot",
            code="invalid_value",
        )
    try:
        job = handler.server.scheduler.submit(
            work,
            prompt=tokens,
            priority=PRIORITY_CODE if code else PRIORITY_OTHER,
            client=client,
            slot=opts.id_slot,
        )
    except QueueFull as e:
        retry = handler.server.scheduler.retry_after()
        raise ApiError(  # 429, as OpenAI's overload: clients back off by Retry-After
            429,
            f"the server is busy ({e}); try again in {retry} s",
            kind="rate_limit_error",
            code="queue_full",
            headers={"Retry-After": str(retry)},
        ) from None
    items = job.items(poll=handler._client_gone)
    try:
        prepared: Prepared | None = next(items, None)
    except EdgespecError as e:
        raise from_exception(e, param) from None
    if prepared is None:
        if job.replaced:  # a newer /infill from this client took its place
            raise ApiError(409, "replaced by a newer request from the same client", code="replaced")
        handler.close_connection = True  # the client went away while queued
        return
    info = {k: v for k, v in prepared.items() if k in ("fim", "truncated", *TRUNCATION)}
    fmt.slot = prepared["slot"]
    fmt.start(prepared["prompt_tokens"], info)
    if not opts.stream:
        outcome = None
        for item in items:
            if isinstance(item, Outcome):
                outcome = item
        if outcome is None:
            handler.close_connection = True
            return
        if job.replaced:  # cut short by a newer /infill from this client
            raise ApiError(409, "replaced by a newer request from the same client", code="replaced")
        handler._send_json(200, fmt.body(outcome), headers)
        return
    handler._start_stream(headers)
    try:
        first = fmt.first_chunk()
        if first is not None:
            handler._sse(first)
        for item in items:
            if isinstance(item, str):
                chunk = fmt.chunk(item)
                if chunk is not None:
                    handler._sse(chunk)
            else:
                for chunk in fmt.last_chunks(item):
                    handler._sse(chunk)
        handler._end_stream()
    except OSError:  # the client went away: stop its generation
        job.cancel.set()
        handler.close_connection = True
