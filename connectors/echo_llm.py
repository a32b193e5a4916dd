"""``EchoLLM``: a deterministic CPU stand-in for ``vllm.LLM``, for demos and tests (no GPU)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any

from lineage_data.connectors.vllm import pil_image

__all__ = ["EchoAsyncLLM", "EchoCompletionOutput", "EchoLLM", "EchoRequestOutput"]


@dataclass(frozen=True, slots=True)
class EchoCompletionOutput:
    """One completion, shaped like ``vllm.CompletionOutput``."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    stop_reason: int | str | None = None


@dataclass(frozen=True, slots=True)
class EchoRequestOutput:
    """One request's result, shaped like ``vllm.RequestOutput``."""

    request_id: str
    prompt: str
    prompt_token_ids: list[int]
    outputs: list[EchoCompletionOutput]
    finished: bool = True


_TEXT_PROMPT_KEYS = frozenset({"prompt", "multi_modal_data", "mm_processor_kwargs"})


class EchoLLM:
    """A deterministic CPU stand-in for ``vllm.LLM`` with the same offline ``generate`` interface.

    It answers ``"echo [image 64x48]: <prompt>"``, the media it was given (``image WxH``, ``video
    FRAMESxWxH``) first so that truncation keeps them. Tokens are the UTF-8 bytes of the answer;
    ``max_tokens`` (a dict's or ``vllm.SamplingParams``') truncates it with
    ``finish_reason="length"``, and without it nothing is truncated. Inputs are checked against
    the shapes vLLM documents (``TypeError``, ``ValueError``), for the whole call as vLLM does.

    Example:
        >>> llm = EchoLLM(model="echo")
        >>> [out] = llm.generate(["hello"], {"max_tokens": 4}, use_tqdm=False)
        >>> out.outputs[0].text, out.outputs[0].finish_reason
        ('echo', 'length')

    Args:
        model: Recorded only.
        engine_kwargs: Recorded; ``limit_mm_per_prompt`` (``{"image": N}``) is enforced.
    """

    def __init__(self, model: str = "echo", **engine_kwargs: Any) -> None:
        self.model = model
        self.engine_kwargs = engine_kwargs
        self._ids = count()

    def __repr__(self) -> str:
        return f"EchoLLM(model={self.model!r})"

    def generate(
        self,
        prompts: Any,
        sampling_params: Any = None,
        *,
        use_tqdm: bool = True,
    ) -> list[EchoRequestOutput]:
        """One :class:`EchoRequestOutput` per prompt, in prompt order.

        Args:
            prompts: A prompt or a sequence of prompts: ``str`` or
                ``{"prompt": str, "multi_modal_data": {...}}``.
            sampling_params: ``None``, one set for all prompts, or a list with one per prompt.
            use_tqdm: Accepted for compatibility; no progress bar is shown.
        """
        if isinstance(prompts, str | dict):
            prompts = [prompts]
        if not isinstance(prompts, Sequence):
            raise TypeError(f"prompts must be a prompt or a sequence, got {type(prompts).__name__}")
        if isinstance(sampling_params, list) and len(sampling_params) != len(prompts):
            raise ValueError("The lengths of prompts and params must be the same.")
        parsed = [self._parse(prompt) for prompt in prompts]
        if not isinstance(sampling_params, list):
            sampling_params = [sampling_params] * len(parsed)
        return [
            self._answer(text, media, _max_tokens(params))
            for (text, media), params in zip(parsed, sampling_params, strict=True)
        ]

    def _parse(self, prompt: Any) -> tuple[str, str]:
        if isinstance(prompt, str):
            return prompt, ""
        if not isinstance(prompt, dict):
            raise TypeError(f"a prompt must be str or dict, got {type(prompt).__name__}")
        if unknown := sorted(set(prompt) - _TEXT_PROMPT_KEYS):
            raise TypeError(f"unexpected prompt keys {unknown}")
        text = prompt.get("prompt")
        if not isinstance(text, str):
            raise TypeError(f"prompt['prompt'] must be str, got {type(text).__name__}")
        data = prompt.get("multi_modal_data", {})
        if not isinstance(data, dict):
            raise TypeError(f"multi_modal_data must be a dict, got {type(data).__name__}")
        return text, self._describe_media(data)

    def _describe_media(self, data: dict[str, Any]) -> str:
        image_cls = pil_image().Image
        parts = []
        for modality, items in data.items():
            if modality == "image":
                images = items if isinstance(items, list) else [items]
                if not images or not all(isinstance(i, image_cls) for i in images):
                    raise TypeError("multi_modal_data['image'] must be a PIL image or a list")
                self._check_limit("image", len(images))
                parts += [f"image {i.width}x{i.height}" for i in images]
            elif modality == "video":
                if not isinstance(items, list) or not items:
                    raise TypeError("multi_modal_data['video'] must be a non-empty list")
                videos = items if isinstance(items[0], list) else [items]
                for frames in videos:
                    if not frames or not all(isinstance(f, image_cls) for f in frames):
                        raise TypeError("a video must be a non-empty list of PIL images")
                self._check_limit("video", len(videos))
                parts += [f"video {len(v)}x{v[0].width}x{v[0].height}" for v in videos]
            else:
                raise TypeError(f"EchoLLM supports image and video, not {modality!r}")
        return f" [{', '.join(parts)}]" if parts else ""

    def _check_limit(self, modality: str, n: int) -> None:
        limit = (self.engine_kwargs.get("limit_mm_per_prompt") or {}).get(modality)
        if isinstance(limit, int) and n > limit:
            raise ValueError(f"limit_mm_per_prompt allows {limit} {modality} item(s), got {n}")

    def _answer(self, prompt: str, media: str, max_tokens: int | None) -> EchoRequestOutput:
        answer = f"echo{media}: {prompt}".encode()
        token_ids = list(answer if max_tokens is None else answer[:max_tokens])
        truncated = len(token_ids) < len(answer)
        completion = EchoCompletionOutput(
            index=0,
            text=bytes(token_ids).decode("utf-8", errors="ignore"),
            token_ids=token_ids,
            finish_reason="length" if truncated else "stop",
        )
        return EchoRequestOutput(
            request_id=str(next(self._ids)),
            prompt=prompt,
            prompt_token_ids=list(prompt.encode()),
            outputs=[completion],
        )


def _max_tokens(params: Any) -> int | None:
    if isinstance(params, Mapping):
        return params.get("max_tokens")
    return getattr(params, "max_tokens", None)


class EchoAsyncLLM:
    """:class:`EchoLLM` with the interface of vLLM's async engine and a latency per request.

    ``generate(prompt, sampling_params, request_id)`` yields the request's one, finished output
    after ``latency_s`` seconds. The most requests in flight at once is kept in
    :attr:`max_in_flight` and, with ``log_path``, appended to that file per finished request (so a
    test can read it from outside the actor).

    Example:
        >>> import asyncio
        >>> async def first(engine):
        ...     return [out async for out in engine.generate("hi", None, "0")][0].outputs[0].text
        >>> asyncio.run(first(EchoAsyncLLM()))
        'echo: hi'
    """

    def __init__(
        self,
        model: str = "echo",
        *,
        latency_s: float = 0.0,
        log_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        self._echo = EchoLLM(model, **kwargs)
        self.latency_s = latency_s
        self.log_path = log_path
        self.in_flight = 0
        self.max_in_flight = 0

    def __repr__(self) -> str:
        return f"EchoAsyncLLM(model={self._echo.model!r}, latency_s={self.latency_s})"

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[EchoRequestOutput]:
        """The answer to one prompt (checked as :meth:`EchoLLM.generate` checks it)."""
        [output] = self._echo.generate([prompt], sampling_params, use_tqdm=False)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            self.in_flight -= 1
        if self.log_path is not None:
            with open(self.log_path, "a") as log:
                log.write(f"{self.max_in_flight}\n")
        yield dataclasses.replace(output, request_id=request_id)
