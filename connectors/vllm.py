"""vLLM offline inference as a batch stage: one engine per actor, one ``generate`` call per batch.

A problem of one row (an image that does not decode, a template that does not format, a request
that finishes with ``"error"`` or ``"abort"``) becomes that row's ``RecordFailure``; an exception
from ``LLM.generate`` itself fails the batch, which is retried. Usage and examples:
``docs/connectors/vllm.md``.
"""

from __future__ import annotations

import asyncio
import io
import itertools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa

from lineage_data import RecordFailure
from lineage_data._core.errors import describe
from lineage_data.connectors import _prompt
from lineage_data.connectors._prompt import NUM_GENERATED_TOKENS, NUM_PROMPT_TOKENS

__all__ = [
    "DEFAULT_PROMPT_TEMPLATE",
    "AsyncLLMLike",
    "AsyncVllmStage",
    "NUM_GENERATED_TOKENS",
    "NUM_PROMPT_TOKENS",
    "LLMLike",
    "VllmStage",
]

INSTALL_HINT = "pip install 'lineage-data[vllm]'"
DEFAULT_PROMPT_TEMPLATE = "{text}"

# vLLM's finish reasons are "stop", "length", "abort", "error" and "repetition"; the last two of
# these stop early by design, the first pair say the request produced no usable completion.
FAILED_FINISH_REASONS = frozenset({"abort", "error"})


class LLMLike(Protocol):
    """The part of ``vllm.LLM`` the stage uses: its offline ``generate``."""

    def generate(
        self, prompts: Sequence[Any], sampling_params: Any = None, *, use_tqdm: bool = True
    ) -> list[Any]:
        """One ``RequestOutput``-like object per prompt, in prompt order."""
        ...


class VllmStage:
    """A ``map_batches`` callable that runs one vLLM ``generate`` call per batch.

    Each row becomes one prompt ``{"prompt": str, "multi_modal_data": {...}}``: ``prompt_template``
    formatted with the row's columns, and its image or frames decoded into RGB ``PIL.Image``s.
    Multi-image prompts need ``engine_kwargs={"limit_mm_per_prompt": {"image": N}}`` in vLLM. The
    result has one row per input row, in input order: ``output_column`` (the first completion's
    text, or a ``RecordFailure``), ``num_prompt_tokens`` and ``num_generated_tokens``.

    Example (on CPU, with the stand-in engine):
        >>> import pyarrow as pa
        >>> from lineage_data.connectors.echo_llm import EchoLLM
        >>> stage = VllmStage("echo", image_column=None, llm_factory=EchoLLM)
        >>> stage(pa.table({"text": ["a page", "another page"]}))["generation"]
        ['echo: a page', 'echo: another page']

    Args:
        model: Model name or local path, passed to the engine as ``model=``.
        prompt_template: ``str.format`` template; its fields name columns of the batch.
        image_column: Column of encoded image bytes, or ``None``.
        frames_column: Column of lists of encoded frames (video clips), or ``None``.
        frames_as: ``"image"`` (frames as an image list) or ``"video"`` (one video item).
        text_columns: If given, the only columns the template may name.
        output_column: Name of the generated-text column.
        sampling_params: Keyword arguments for ``vllm.SamplingParams`` (``None``: the model's).
        engine_kwargs: Extra keyword arguments for ``vllm.LLM`` (``max_model_len``, ...).
        llm_factory: Called as ``llm_factory(model=model, **engine_kwargs)`` instead of
            ``vllm.LLM``; returns an :class:`LLMLike` (e.g. ``echo_llm.EchoLLM``).
        sampling_params_factory: Called as ``factory(**sampling_params)`` instead of
            ``vllm.SamplingParams``; with an ``llm_factory`` and without it, a plain dict is sent.

    Raises:
        ImportError: vLLM is needed (no ``llm_factory``) but not installed.
        ValueError: The template or the column options contradict each other.
    """

    def __init__(
        self,
        model: str,
        *,
        prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
        image_column: str | None = "image",
        frames_column: str | None = None,
        frames_as: str = "image",
        text_columns: Sequence[str] = (),
        output_column: str = "generation",
        sampling_params: Mapping[str, Any] | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
        llm_factory: Callable[..., LLMLike] | None = None,
        sampling_params_factory: Callable[..., Any] | None = None,
    ) -> None:
        if frames_as not in ("image", "video"):
            raise ValueError(f"frames_as must be 'image' or 'video', got {frames_as!r}")
        self._media = [c for c in (image_column, frames_column) if c is not None]
        self._fields = _prompt.checked_fields(
            prompt_template, output_column, self._media, text_columns
        )
        self._template = prompt_template
        self._image_column = image_column
        self._frames_column = frames_column
        self._frames_as = frames_as
        self._output_column = output_column
        self._model = model
        self._engine_kwargs = dict(engine_kwargs or {})
        self._llm_factory = llm_factory or _vllm_attribute("LLM")
        if sampling_params is None:
            self._sampling_params: Any = None
        elif sampling_params_factory is not None:
            self._sampling_params = sampling_params_factory(**sampling_params)
        elif llm_factory is None:
            self._sampling_params = _vllm_attribute("SamplingParams")(**sampling_params)
        else:
            self._sampling_params = dict(sampling_params)
        self._llm: LLMLike | None = self._llm_factory(model=model, **self._engine_kwargs)

    def __call__(self, batch: pa.Table | Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
        """Generate one output per row of ``batch`` (a table or a mapping of columns), in row order.

        Raises:
            ValueError: The batch lacks a column the stage is configured to read.
            Exception: Whatever ``LLM.generate`` raises, unchanged (the batch fails).
        """
        values, prompts = self._prompts(batch)
        outputs = self._generate(list(prompts.values())) if prompts else []
        answers = {row: _read_output(o) for row, o in zip(prompts, outputs, strict=True)}
        return _prompt.output_columns(self._output_column, values, answers)

    def _prompts(
        self, batch: pa.Table | Mapping[str, Sequence[Any]]
    ) -> tuple[list[Any], dict[int, dict[str, Any]]]:
        """Per row its failure or None, and the prompt of every other row."""
        columns, num_rows = _prompt.batch_columns(batch, {*self._media, *self._fields}, "VllmStage")
        return _prompt.requests(num_rows, lambda row: self._row_prompt(columns, row))

    def _row_prompt(
        self, columns: dict[str, list[Any]], row: int
    ) -> dict[str, Any] | RecordFailure:
        text = _prompt.prompt_text("VllmStage", self._template, self._fields, columns, row)
        if isinstance(text, RecordFailure):
            return text
        image = columns[self._image_column][row] if self._image_column is not None else None
        frames = (
            (columns[self._frames_column][row] or []) if self._frames_column is not None else []
        )
        encoded = [] if image is None else [(f"image in column {self._image_column!r}", image)]
        encoded += [
            (f"frame {i} in column {self._frames_column!r}", f) for i, f in enumerate(frames)
        ]
        decoded: list[Any] = []
        for what, data in encoded:
            try:
                decoded.append(_decode_image(data))
            except Exception as exc:
                return RecordFailure(f"VllmStage: {what} does not decode: {describe(exc)}")
        if self._media and not decoded:
            return RecordFailure(f"VllmStage: the row has no image in column(s) {self._media}")
        images = 0 if image is None else 1  # the image, then the frames
        return {"prompt": text, **self._multi_modal_data(decoded[:images], decoded[images:])}

    def _multi_modal_data(self, images: list[Any], frames: list[Any]) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self._frames_as == "video" and frames:
            data["video"] = frames
            frames = []
        items = images + frames
        if len(items) == 1:
            data["image"] = items[0]
        elif items:
            data["image"] = items
        return {"multi_modal_data": data} if data else {}

    def _engine(self) -> Any:
        """The engine, started afresh if it died during an earlier batch."""
        if self._llm is None:
            self._llm = self._llm_factory(model=self._model, **self._engine_kwargs)
        return self._llm

    def _generate(self, prompts: list[dict[str, Any]]) -> list[Any]:
        try:
            outputs = self._engine().generate(
                prompts, sampling_params=self._sampling_params, use_tqdm=False
            )
        except Exception as exc:
            if _is_engine_dead(exc):
                self._llm = None
            raise
        outputs = list(outputs)
        _check_alignment(prompts, outputs)
        return outputs


class AsyncLLMLike(Protocol):
    """The part of vLLM's async engine (``AsyncLLMEngine``, ``AsyncLLM``) the stage uses."""

    def generate(self, prompt: Any, sampling_params: Any, request_id: str) -> AsyncIterator[Any]:
        """The request's ``RequestOutput``s as they come; the last one is finished."""
        ...


class AsyncVllmStage(VllmStage):
    """:class:`VllmStage` on vLLM's async engine: several batches in flight per actor.

    ``__call__`` is a coroutine, so an actor pool with
    ``ActorPoolStrategy(size=n, max_concurrent_calls_per_actor=k)`` keeps k batches in flight per
    actor and the engine schedules their requests together (as Ray Data's LLM processor does with
    ``max_concurrent_batches``). Same arguments, outputs and failure policy as :class:`VllmStage`;
    ``llm_factory`` builds an :class:`AsyncLLMLike` engine (default:
    ``vllm.AsyncLLMEngine.from_engine_args``), e.g. ``echo_llm.EchoAsyncLLM``.
    """

    def __init__(self, model: str, **kwargs: Any) -> None:
        if kwargs.get("llm_factory") is None:
            kwargs["llm_factory"] = _async_engine
            if kwargs.get("sampling_params") is not None:
                kwargs.setdefault("sampling_params_factory", _vllm_attribute("SamplingParams"))
        super().__init__(model, **kwargs)
        self._requests = itertools.count()

    async def __call__(  # type: ignore[override]
        self, batch: pa.Table | Mapping[str, Sequence[Any]]
    ) -> dict[str, list[Any]]:
        """Generate one output per row of ``batch``, in row order (see :meth:`VllmStage.__call__`)."""
        values, prompts = self._prompts(batch)
        engine = self._engine()
        outputs = await asyncio.gather(*(self._one(engine, p) for p in prompts.values()))
        answers = {row: _read_output(o) for row, o in zip(prompts, outputs, strict=True)}
        return _prompt.output_columns(self._output_column, values, answers)

    async def _one(self, engine: Any, prompt: dict[str, Any]) -> Any:
        """The finished output of one request (a request that ends in error fails its row)."""
        final = None
        try:
            async for output in engine.generate(
                prompt, self._sampling_params, str(next(self._requests))
            ):
                final = output
        except Exception as exc:
            if _is_engine_dead(exc):
                self._llm = None
                raise  # the batch fails and is retried on a fresh engine
            return exc
        return final if final is not None else RuntimeError("the request returned nothing")


def _async_engine(model: str, **engine_kwargs: Any) -> Any:
    args = _vllm_attribute("AsyncEngineArgs")(model=model, **engine_kwargs)
    return _vllm_attribute("AsyncLLMEngine").from_engine_args(args)


def _decode_image(data: Any) -> Any:
    """Decode encoded image bytes into an RGB ``PIL.Image`` (fully loaded, so errors show here)."""
    image_module = pil_image()
    if isinstance(data, image_module.Image):
        image = data
    elif isinstance(data, bytes | bytearray | memoryview):
        image = image_module.open(io.BytesIO(data))
        image.load()
    else:
        raise TypeError(f"expected encoded image bytes, got {type(data).__name__}")
    return image if image.mode == "RGB" else image.convert("RGB")


def _check_alignment(prompts: list[dict[str, Any]], outputs: list[Any]) -> None:
    """Raise unless ``outputs[i]`` answers ``prompts[i]``, as far as ids and echoed prompts tell."""
    if len(outputs) != len(prompts):
        raise RuntimeError(
            f"VllmStage: the engine returned {len(outputs)} outputs for {len(prompts)} prompts"
        )
    ids = [getattr(o, "request_id", None) for o in outputs if not isinstance(o, BaseException)]
    if ids and None not in ids:
        if len(set(ids)) != len(ids):
            raise RuntimeError(f"VllmStage: the engine returned duplicate request ids {ids}")
        numeric = [int(str(i)) for i in ids if str(i).isdigit()]
        if len(numeric) == len(ids) and numeric != sorted(numeric):
            raise RuntimeError(f"VllmStage: the engine returned outputs out of order: {ids}")
    for index, (prompt, output) in enumerate(zip(prompts, outputs, strict=True)):
        if isinstance(output, BaseException) or "multi_modal_data" in prompt:
            continue  # a multimodal prompt may come back with its placeholders expanded
        echoed = getattr(output, "prompt", None)
        if echoed is not None and echoed != prompt["prompt"]:
            raise RuntimeError(
                f"VllmStage: output {index} answers prompt {echoed!r}, not {prompt['prompt']!r}"
            )


def _read_output(output: Any) -> _prompt.Answer:
    """``(text or RecordFailure, prompt tokens, generated tokens)`` of one request's output."""
    if isinstance(output, BaseException):
        return RecordFailure(f"VllmStage: the request failed: {describe(output)}"), None, None
    completions = getattr(output, "outputs", None)
    if not completions:
        return RecordFailure("VllmStage: the request returned no completion"), None, None
    if getattr(output, "finished", True) is False:
        return RecordFailure("VllmStage: the request did not finish"), None, None
    first = completions[0]
    reason = getattr(first, "finish_reason", None)
    if reason is not None and str(reason) in FAILED_FINISH_REASONS:
        return RecordFailure(f"VllmStage: the request finished with {str(reason)!r}"), None, None
    text = getattr(first, "text", None)
    if text is None:
        return RecordFailure("VllmStage: the completion has no text"), None, None
    prompt_ids = getattr(output, "prompt_token_ids", None)
    token_ids = getattr(first, "token_ids", None)
    return (
        text,
        None if prompt_ids is None else len(prompt_ids),
        None if token_ids is None else len(token_ids),
    )


def _is_engine_dead(exc: BaseException) -> bool:
    """True for vLLM's ``EngineDeadError`` (matched by name, so vLLM need not be importable)."""
    return any(cls.__name__ == "EngineDeadError" for cls in type(exc).__mro__)


def _vllm_attribute(name: str) -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"VllmStage needs vLLM: {INSTALL_HINT}") from exc
    return getattr(vllm, name)


def pil_image() -> Any:
    """Pillow's ``PIL.Image`` module, or an ImportError with the install hint."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError(f"VllmStage needs Pillow to decode images: {INSTALL_HINT}") from exc
    return Image
