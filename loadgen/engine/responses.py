"""Response bodies and stream chunks in vLLM's shapes, for both dialects.

Why this module exists: clients of this tool parse vLLM's exact placement of fields, so the
engine must produce it: completions put ``token_ids`` and ``prompt_token_ids`` on the choice
and logprobs in the legacy ``tokens``/``token_logprobs``/``top_logprobs``/``text_offset`` shape;
chat puts ``token_ids`` on the choice, ``prompt_token_ids`` on the response (first chunk when
streaming) and logprobs in ``logprobs.content[]``. ``return_tokens_as_token_ids`` renders tokens
as ``token_id:N``. A completions request of several prompts gets one choice per prompt, each rendered
by its own :class:`Renderer` (``index``: the prompt's place in the list), and usage summed over them, as
vLLM answers a prompt list; with ``n`` each prompt has n choices (``index`` prompt * n + child), its prompt
counted once in usage, as vLLM counts it. ``prompt_logprobs`` goes on a completions choice as vLLM puts it:
None for the first position, then per position ``{token_id: {logprob, rank, decoded_token}}``, the given
token first with its rank, then the top k ranked 1..k (a given token among them keeps its place and takes
its top-k rank, as vLLM's dict does). Pure: events in, dicts out; serialisation happens in the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadgen.engine.protocol import MODEL_ID, ParsedRequest
from loadgen.engine.sampling import PositionLogprobs
from loadgen.engine.scheduler import TokenEvent
from loadgen.engine.tokenizer import Tokenizer


@dataclass
class Renderer:
    """Renders one request's events; keeps the running text offset across stream chunks."""

    req: ParsedRequest
    tok: Tokenizer
    response_id: str
    created: int
    index: int = 0  # the choice's index: prompt * n + child
    child: int = 0  # its place among its prompt's n choices: only child 0 counts the prompt in summed usage
    text_offset: int = 0
    generated: int = 0
    prompt_tokens_details: bool = True  # vLLM sends them only with --enable-prompt-tokens-details
    _first_chunk: bool = field(default=True)

    def _token_str(self, token_id: int) -> str:
        return f"token_id:{token_id}" if self.req.tokens_as_ids else self.tok.token_text(token_id)

    def usage(self, cached_tokens: int) -> dict[str, Any]:
        prompt = len(self.req.prompt_ids)
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + self.generated,
            "completion_tokens": self.generated,
            "prompt_tokens_details": {"cached_tokens": cached_tokens} if self.prompt_tokens_details else None,
        }

    def _completion_logprobs(self, events: list[TokenEvent]) -> dict[str, Any] | None:
        if self.req.params.logprobs is None:
            return None
        tokens, lps, tops, offsets = [], [], [], []
        for ev in events:
            text = self._token_str(ev.token_id)
            top = {self._token_str(t): max(lp, -9999.0) for t, lp in ev.top}
            top.setdefault(text, max(ev.logprob or 0.0, -9999.0))
            tokens.append(text)
            lps.append(max(ev.logprob if ev.logprob is not None else 0.0, -9999.0))
            tops.append(top)
            offsets.append(self.text_offset)
            self.text_offset += len(self.tok.token_text(ev.token_id))
        return {"text_offset": offsets, "token_logprobs": lps, "tokens": tokens, "top_logprobs": tops}

    def _entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = self._token_str(token_id)
        raw = text.encode() if self.req.tokens_as_ids else self.tok.token_bytes[token_id]
        return {"token": text, "logprob": max(logprob, -9999.0), "bytes": list(raw)}

    def _chat_logprobs(self, events: list[TokenEvent]) -> dict[str, Any] | None:
        if self.req.params.logprobs is None:
            return None
        content = []
        for ev in events:
            entry = self._entry(ev.token_id, ev.logprob if ev.logprob is not None else 0.0)
            entry["top_logprobs"] = [self._entry(t, lp) for t, lp in ev.top]
            content.append(entry)
        return {"content": content}

    def _prompt_logprobs(self, positions: tuple[PositionLogprobs, ...]) -> list[dict[str, Any] | None]:
        out: list[dict[str, Any] | None] = [None]
        for pos in positions:
            ranked = [(pos.token_id, pos.logprob, pos.rank)]
            ranked += [(t, lp, rank) for rank, (t, lp) in enumerate(pos.top, start=1)]
            entry: dict[str, Any] = {}
            for token, lp, rank in ranked:
                entry[str(token)] = {
                    "logprob": max(lp, -9999.0),
                    "rank": rank,
                    "decoded_token": self.tok.token_text(token),
                }
            out.append(entry)
        return out

    def _choice(
        self, events: list[TokenEvent], stream: bool, prompt_logprobs: tuple[PositionLogprobs, ...] | None = None
    ) -> dict[str, Any]:
        self.generated += len(events)
        last = events[-1] if events else None
        text = "".join(ev.text for ev in events)
        choice: dict[str, Any] = {"index": self.index}
        if self.req.chat:
            if stream:
                choice["delta"] = {"content": text} if events else {}
            else:
                choice["message"] = {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "reasoning": None,
                }
            choice["logprobs"] = self._chat_logprobs(events)
        else:
            choice["text"] = text
            choice["logprobs"] = self._completion_logprobs(events)
        choice["finish_reason"] = last.finish_reason if last else None
        choice["stop_reason"] = last.stop_reason if last else None
        if self.req.return_token_ids:
            choice["token_ids"] = [ev.token_id for ev in events]
        if not self.req.chat:
            if not stream:
                choice["prompt_logprobs"] = None if prompt_logprobs is None else self._prompt_logprobs(prompt_logprobs)
            first = not stream or self._first_chunk
            choice["prompt_token_ids"] = self.req.prompt_ids if first and self.req.return_token_ids else None
        return choice

    def full(
        self, events: list[TokenEvent], cached_tokens: int, prompt_logprobs: tuple[PositionLogprobs, ...] | None = None
    ) -> dict[str, Any]:
        """The non-streaming response body (``prompt_logprobs``: the prompt's re-score, when it was asked)."""
        body: dict[str, Any] = {
            "id": self.response_id,
            "object": "chat.completion" if self.req.chat else "text_completion",
            "created": self.created,
            "model": MODEL_ID,
            "choices": [self._choice(events, stream=False, prompt_logprobs=prompt_logprobs)],
            "system_fingerprint": None,
            "usage": self.usage(cached_tokens),
        }
        if self.req.chat:
            body["prompt_token_ids"] = self.req.prompt_ids if self.req.return_token_ids else None
        return body

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.response_id,
            "object": "chat.completion.chunk" if self.req.chat else "text_completion",
            "created": self.created,
            "model": MODEL_ID,
            "choices": choices,
        }

    def role_chunk(self) -> dict[str, Any]:
        """Chat streams open with the assistant role (and the prompt ids when asked)."""
        chunk = self._chunk(
            [
                {
                    "index": self.index,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ]
        )
        if self.req.return_token_ids:
            chunk["prompt_token_ids"] = self.req.prompt_ids
        return chunk

    def delta_chunk(self, events: list[TokenEvent], cached_tokens: int) -> dict[str, Any]:
        """One stream chunk carrying every event that arrived since the last one."""
        chunk = self._chunk([self._choice(events, stream=True)])
        self._first_chunk = False
        if self.req.continuous_usage:
            chunk["usage"] = self.usage(cached_tokens)
        return chunk

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        """The stream's last chunk: no choice, the usage (``usage(...)``, or ``summed_usage`` of a prompt list)."""
        chunk = self._chunk([])
        chunk["usage"] = usage
        return chunk


def summed_usage(usages: list[tuple[Renderer, dict[str, Any]]]) -> dict[str, Any]:
    """Usage of a request of several choices from each choice's own: completion tokens summed over every choice,
    prompt and cached tokens over each prompt's first choice (vLLM counts a prompt once, whatever ``n``)."""
    firsts = [u for r, u in usages if r.child == 0]
    prompt = sum(u["prompt_tokens"] for u in firsts)
    completion = sum(u["completion_tokens"] for _, u in usages)
    total: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }
    details = [u["prompt_tokens_details"] for u in firsts]
    total["prompt_tokens_details"] = (
        None if details[0] is None else {"cached_tokens": sum(d["cached_tokens"] for d in details)}
    )
    return total


def merged_body(parts: list[tuple[Renderer, dict[str, Any]]]) -> dict[str, Any]:
    """One answer to a request of several choices from each choice's own ``full`` body (same id): their choices
    in order, each carrying its index, and usage summed (``summed_usage``)."""
    bodies = [body for _, body in parts]
    return {
        **bodies[0],
        "choices": [choice for body in bodies for choice in body["choices"]],
        "usage": summed_usage([(r, body["usage"]) for r, body in parts]),
    }


def generate_requests(parsed: ParsedRequest, request_id: str) -> list[dict[str, Any]]:
    """vLLM's render routes' answer: per prompt, its token ids and sampling in ``GenerateRequest``'s fields (ids
    ``<id>-<i>`` when there are several, as vLLM names a prompt list's engine requests)."""
    p = parsed.params
    sampling = {
        "max_tokens": p.max_tokens,
        "temperature": p.temperature,
        "top_p": p.top_p,
        "top_k": p.top_k,
        "min_p": p.min_p,
        "seed": p.seed,
        "n": parsed.n,
        "stop": list(p.stop),
        "stop_token_ids": list(p.stop_token_ids),
        "ignore_eos": p.ignore_eos,
        "logprobs": p.logprobs,
        "prompt_logprobs": p.prompt_logprobs,
    }
    several = len(parsed.prompts) > 1
    return [
        {
            "request_id": f"{request_id}-{i}" if several else request_id,
            "token_ids": prompt_ids,
            "features": None,
            "sampling_params": sampling,
            "model": MODEL_ID,
            "stream": parsed.stream,
            "stream_options": None,
            "cache_salt": parsed.cache_salt,
            "priority": 0,
            "kv_transfer_params": None,
        }
        for i, prompt_ids in enumerate(parsed.prompts)
    ]
