"""OCR connector: page images -> ordered text lines -> recognized text, with RapidOCR (PP-OCRv4).

`rapidocr-onnxruntime <https://github.com/RapidAI/RapidOCR>`_'s wheel carries PP-OCRv4's ONNX
weights and all the model-specific code; the reading order is
:mod:`lineage_data.connectors.layout`'s XY-cut (RapidOCR's own reads across two columns).
:class:`DetectLines` is a second-level **expand** (a page in, its lines out),
:class:`RecognizeLines` a 1:1 **batch UDF** (one recognizer call per batch), and :func:`page_text`
and :func:`document_text` the reducers; the OCR connector guide shows the pipeline::

    pages = docs.expand_lineage(render_pages, fn_kwargs={"dpi": 150, "page_errors": "keep"})
    lines = pages.expand_lineage(DetectLines, compute=ray.data.ActorPoolStrategy(size=2))
    text = lines.map_batches(RecognizeLines, compute=ray.data.ActorPoolStrategy(size=2))
    out = text.reduce_lineage(page_text).reduce_lineage(document_text)

Needs ``pip install 'lineage-data[ocr]'`` (rapidocr-onnxruntime, with onnxruntime and OpenCV),
imported when a stage is built.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lineage_data import RecordFailure
from lineage_data.connectors import errors
from lineage_data.connectors.layout import quad_to_box, reading_order, text_rows

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

__all__ = [
    "DetectLines",
    "RecognizeLines",
    "character_error_rate",
    "document_text",
    "page_text",
    "word_similarity",
]

_INSTALL_HINT = "pip install 'lineage-data[ocr]'"
_DEVICES = ("cpu", "cuda")


def _engine(device: str, threads: int | None, **options: Any) -> Any:
    """A ``RapidOCR`` engine: the package's own config handling, sessions built here, once."""
    if device not in _DEVICES:
        raise ValueError(f"device must be one of {list(_DEVICES)}, got {device!r}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1 or None (onnxruntime's default), got {threads!r}")
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError as exc:
        raise ImportError(f"the OCR connector needs rapidocr-onnxruntime: {_INSTALL_HINT}") from exc
    cuda = device == "cuda"
    with _memory_arena():
        return RapidOCR(
            det_use_cuda=cuda,
            cls_use_cuda=cuda,
            rec_use_cuda=cuda,
            intra_op_num_threads=-1 if threads is None else threads,
            **options,
        )


_ARENA_LOCK = threading.Lock()


@contextlib.contextmanager
def _memory_arena() -> Iterator[None]:
    """RapidOCR's sessions, built with onnxruntime's CPU memory arena on.

    RapidOCR 1.4 turns the arena off and has no option for it; without it a page cost ~8x the page
    faults and 10-12 % more CPU here. Its session-options hook is wrapped while it builds.
    """
    from rapidocr_onnxruntime.utils import infer_engine

    session = infer_engine.OrtInferSession
    original = session.__dict__["_init_sess_opts"]

    def with_arena(config: dict[str, Any]) -> Any:
        options = original.__func__(config)
        options.enable_cpu_mem_arena = True
        return options

    with _ARENA_LOCK:
        session._init_sess_opts = staticmethod(with_arena)
        try:
            yield
        finally:
            session._init_sess_opts = original


class DetectLines:
    """Expand one page image (PNG or JPEG bytes) into its text lines, in reading order.

    Yields, for line ``i`` of ``n``::

        {"line_index": i, "line_count": n, "box": [x0, y0, x1, y1, x2, y2, x3, y3],
         "det_score": float, "crop": bytes, "crop_width": int, "crop_height": int}

    ``box`` holds the four corners, clockwise from top-left, in page pixels; ``crop`` is the line
    cut out of the page (PNG, straightened). A page without text yields nothing; a missing or
    undecodable ``image`` raises :class:`~lineage_data.connectors.errors.CorruptInputError`.

    Args:
        device: ``"cpu"`` or ``"cuda"`` (onnxruntime's CUDA provider).
        threads: onnxruntime intra-op threads (None: onnxruntime's default, every core).
        image_column: The column with the page image.
        box_thresh: Minimum detection score of a kept line (RapidOCR's ``box_thresh``).
        unclip_ratio: How far each detected box is grown (RapidOCR's ``unclip_ratio``).

    Example:
        >>> from lineage_data.connectors.testing.corpus import make_page_image
        >>> image, _ = make_page_image(["lineage data"], width=320, height=120)
        >>> [line["line_index"] for line in DetectLines()({"image": image})]
        [0]
    """

    def __init__(
        self,
        *,
        device: str = "cpu",
        threads: int | None = 1,
        image_column: str = "image",
        box_thresh: float = 0.5,
        unclip_ratio: float = 1.6,
    ) -> None:
        self._ocr = _engine(
            device, threads, use_cls=False, det_box_thresh=box_thresh, det_unclip_ratio=unclip_ratio
        )
        self.image_column = image_column

    def __call__(self, row: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Detect, order and crop the lines of one page; see the class docstring."""
        yield from self._lines(row)  # all the work happens before the first yield

    def _lines(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        import cv2
        import numpy as np

        ocr = self._ocr
        image = self._image(row)
        raw_h, raw_w = image.shape[:2]
        # RapidOCR.__call__'s detection half, step by step, because __call__ drops the box scores.
        image, ratio_h, ratio_w = ocr.preprocess(image)
        record: dict[str, Any] = {"preprocess": {"ratio_h": ratio_h, "ratio_w": ratio_w}}
        image, record = ocr.maybe_add_letterbox(image, record)
        found = self._detect(image)
        if not found:
            return []
        order = reading_order([quad_to_box(box.reshape(-1).tolist()) for box, _ in found])
        corners = np.ascontiguousarray(np.stack([found[i][0] for i in order]).astype(np.float32))
        crops = ocr.get_crop_img_list(image, list(corners))
        origin = ocr._get_origin_points(list(corners), record, raw_h, raw_w)
        return [
            {
                "line_index": index,
                "line_count": len(crops),
                "box": [round(float(v), 1) for v in box.reshape(-1)],
                "det_score": round(found[i][1], 4),
                # OpenCV encodes any non-empty uint8 image: no failure to handle.
                "crop": cv2.imencode(".png", crop, [cv2.IMWRITE_PNG_COMPRESSION, 1])[1].tobytes(),
                "crop_width": int(crop.shape[1]),
                "crop_height": int(crop.shape[0]),
            }
            for index, (crop, box, i) in enumerate(zip(crops, origin, order, strict=True))
        ]

    def _image(self, row: dict[str, Any]) -> np.ndarray:
        """The page image as RapidOCR loads it, or the page's typed failure."""
        name = errors.input_name(row, kind="page")
        data = row.get(self.image_column)
        if data is None:
            cause = row.get("error") or f"no {self.image_column!r} to run OCR on"
            raise errors.CorruptInputError.for_input(name, cause)
        try:
            return self._ocr.load_img(bytes(data))
        except Exception as exc:  # PIL raises several types for undecodable bytes
            raise errors.CorruptInputError.for_input(
                name, f"the page image cannot be decoded ({exc})"
            ) from exc

    def _detect(self, image: np.ndarray) -> list[tuple[np.ndarray, float]]:
        """(box, score) of each line RapidOCR's detector finds, after its own size filter."""
        det = self._ocr.text_det
        det.preprocess_op = det.get_preprocess(max(image.shape[0], image.shape[1]))
        prepared = det.preprocess_op(image)
        if prepared is None:
            return []
        boxes, scores = det.postprocess_op(det.infer(prepared)[0], image.shape[:2])
        return [
            (kept[0], float(score))
            for box, score in zip(boxes, scores, strict=True)
            if len(kept := det.filter_tag_det_res(box[None], image.shape[:2]))
        ]


class RecognizeLines:
    """Batch UDF: recognize the line crops of one batch (from many pages) in one recognizer call.

    Returns the batch's other columns plus ``text`` and ``confidence``, one row per input row. The
    recognizer runs chunks of ``chunk_size`` crops padded to a common width: 1 on the CPU (45 ms a
    line here, 442 in chunks of 64), 32 on CUDA. An undecodable crop gets
    ``RecordFailure("unreadable crop: ...")`` as its text.

    Args:
        device: ``"cpu"`` or ``"cuda"``.
        threads: onnxruntime intra-op threads (None: onnxruntime's default, every core).
        chunk_size: Crops per ONNX run (RapidOCR's ``rec_batch_num``; None: 1 on CPU, 32 on CUDA).
        use_angle_cls: Run PP-OCR's 0/180-degree classifier first (for upside-down scans).
        column: The column with the crops.
        keep_crop: Keep the crop bytes in the output rows (dropped by default).
        gap_spaces: Put back the spaces the recognizer drops between words where the crop shows
            a clear gap ("themime" -> "the mime").

    Example:
        >>> from lineage_data.connectors.testing.corpus import make_page_image
        >>> image, _ = make_page_image(["lineage data"], width=320, height=120)
        >>> crops = [line["crop"] for line in DetectLines()({"image": image})]
        >>> out = RecognizeLines()({"crop": crops + [b"not an image"]})
        >>> out["text"][0], out["text"][1].cause
        ('lineage data', 'unreadable crop: not a PNG/JPEG image (12 bytes)')
    """

    def __init__(
        self,
        *,
        device: str = "cpu",
        threads: int | None = 1,
        chunk_size: int | None = None,
        use_angle_cls: bool = False,
        column: str = "crop",
        keep_crop: bool = False,
        gap_spaces: bool = True,
    ) -> None:
        if chunk_size is None:
            chunk_size = 32 if device == "cuda" else 1
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size!r}")
        self._ocr = _engine(device, threads, use_cls=use_angle_cls, rec_batch_num=chunk_size)
        self.use_angle_cls = use_angle_cls
        self.column = column
        self.keep_crop = keep_crop
        self.gap_spaces = gap_spaces

    def __call__(self, batch: pa.Table | dict[str, list[Any]]) -> dict[str, list[Any]]:
        """Recognize one batch; see the class docstring."""
        import cv2
        import numpy as np

        values = errors.column_values(batch, self.column, type(self).__name__)
        texts: list[Any] = [None] * len(values)
        confidence: list[float | None] = [None] * len(values)
        images, where = [], []
        for i, value in enumerate(values):
            image = None
            if value:
                image = cv2.imdecode(np.frombuffer(value, np.uint8), cv2.IMREAD_COLOR)
            if image is None or image.size == 0:
                size = len(value or b"")
                texts[i] = RecordFailure(f"unreadable crop: not a PNG/JPEG image ({size} bytes)")
                continue
            images.append(image)
            where.append(i)
        if images:
            if self.use_angle_cls:
                images, _, _ = self._ocr.text_cls(images)
            results, _ = self._ocr.text_rec(images, return_word_box=self.gap_spaces)
            for i, image, (text, score, *info) in zip(where, images, results, strict=True):
                if info and text:
                    text = _with_gap_spaces(text, image, info[0])
                texts[i], confidence[i] = text, round(float(score), 4)
        out = {
            name: errors.column_values(batch, name, type(self).__name__)
            for name in errors.column_names(batch)
            if name not in (self.column, "text", "confidence")
            or (name == self.column and self.keep_crop)
        }
        out.update(text=texts, confidence=confidence)
        return out


_GAP_HEIGHT = 0.16  # a word gap is wider than this fraction of the crop height ...
_GAP_MEDIAN = 2.0  # ... and than this many times the line's median gap between characters
_BULLETS = frozenset("•·●○◦▪■")


def _with_gap_spaces(text: str, image: np.ndarray, word_box: list[Any]) -> str:
    """``text`` with a space where the crop shows a word gap the recognizer read as none.

    ``word_box`` is RapidOCR's ``return_word_box`` record: the CTC steps, then each character's.
    """
    import cv2

    steps, steps_of_words = word_box[0], word_box[2]
    positions = [step for word in steps_of_words for step in word]
    if len(positions) != len(text) or steps <= 0:
        return text
    gray = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)  # crops are decoded with IMREAD_COLOR
    _, ink = cv2.threshold(gray, 0, 1, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    empty: list[bool] = (ink.max(axis=0) == 0).tolist()
    scale = gray.shape[1] / steps
    centres = [(p + 0.5) * scale for p in positions]
    return _gap_spaces(text, centres, empty, int(gray.shape[0]))


def _gap_spaces(text: str, centres: list[float], empty: list[bool], height: int) -> str:
    """The pure rule of ``gap_spaces``: ``text`` with spaces added at its word gaps.

    A gap is the longest run of ``empty`` (inkless) columns between two characters' ``centres``.
    A space goes between two letters or digits (or a bullet and one) whose gap is wider than
    ``0.16 * height`` and than twice the line's median gap: the median keeps monospace code as read.
    """
    gaps = []
    for a, b in itertools.pairwise(centres):
        run = best = 0
        for x in range(max(int(a), 0), min(int(b) + 1, len(empty))):
            run = run + 1 if empty[x] else 0
            best = max(best, run)
        gaps.append(best)
    between = [g for k, g in enumerate(gaps) if text[k] != " " and text[k + 1] != " "]
    if not between:
        return text
    threshold = max(_GAP_HEIGHT * height, _GAP_MEDIAN * statistics.median(between))
    out = [text[0]]
    for k, gap in enumerate(gaps):
        left, right = text[k], text[k + 1]
        word_gap = (left.isalnum() or left in _BULLETS) and right.isalnum()
        if word_gap and gap > threshold:
            out.append(" ")
        out.append(right)
    return "".join(out)


# ---------------------------------------------------------------------------------------- reducers


def page_text(parent: dict[str, Any], lines: list[dict[str, Any]]) -> dict[str, Any]:
    r"""Reduce a page's recognized lines (in reading order) into the page's text.

    Lines that share a :func:`lineage_data.connectors.layout.text_rows` row are joined with a
    space, rows with ``\n``. Returns the page's columns without ``image`` and ``error``, plus
    ``text`` ("" for no lines), ``lines`` (how many) and ``confidence`` (the mean, or None).

    Example:
        >>> page = {"page_index": 0, "image": b"..."}
        >>> lines = [{"text": "a", "box": [0, 0, 9, 0, 9, 9, 0, 9], "confidence": 0.5},
        ...          {"text": "b", "box": [20, 1, 29, 1, 29, 9, 20, 9], "confidence": 1.0},
        ...          {"text": "c", "box": [0, 20, 29, 20, 29, 29, 0, 29], "confidence": 0.9}]
        >>> page_text(page, lines)
        {'page_index': 0, 'text': 'a b\nc', 'lines': 3, 'confidence': 0.8}
    """
    out = {k: v for k, v in parent.items() if k not in ("image", "error", "text")}
    row = _row_ids(lines)
    parts: list[str] = []
    for index, line in enumerate(lines):
        if index:
            same = row[index] is not None and row[index] == row[index - 1]
            parts.append(" " if same else "\n")
        parts.append(line.get("text") or "")
    scores = [line["confidence"] for line in lines if line.get("confidence") is not None]
    out["text"] = "".join(parts)
    out["lines"] = len(lines)
    out["confidence"] = round(sum(scores) / len(scores), 4) if scores else None
    return out


def _row_ids(lines: list[dict[str, Any]]) -> list[int | None]:
    """Each line's text row on its page (None: a line without a box)."""
    where = [i for i, line in enumerate(lines) if line.get("box")]
    ids: list[int | None] = [None] * len(lines)
    for row, members in enumerate(text_rows([quad_to_box(lines[i]["box"]) for i in where])):
        for member in members:
            ids[where[member]] = row
    return ids


def document_text(parent: dict[str, Any], pages: list[dict[str, Any]]) -> dict[str, Any]:
    r"""Reduce a document's pages (in page order) into its text and markdown.

    Returns the document's ``path`` and ``size`` (if any), ``pages``, ``text`` (pages separated by
    a blank line) and ``markdown`` (each page under a ``<!-- page N -->`` marker, from 1).

    Example:
        >>> doc = document_text({"path": "a.pdf"}, [{"text": "one"}, {"text": ""}])
        >>> doc["pages"], doc["text"], doc["markdown"].splitlines()
        (2, 'one\n\n', ['<!-- page 1 -->', 'one', '', '<!-- page 2 -->'])
    """
    texts = [page.get("text") or "" for page in pages]
    out: dict[str, Any] = {k: parent[k] for k in ("path", "size") if k in parent}
    out["pages"] = len(pages)
    out["text"] = "\n\n".join(texts)
    out["markdown"] = "\n\n".join(f"<!-- page {i + 1} -->\n{t}" for i, t in enumerate(texts))
    return out


def character_error_rate(hypothesis: str, reference: str, *, spaces: bool = False) -> float:
    """Edit distance over reference length, after removing whitespace and folding case.

    PP-OCR drops some spaces between words, so by default the rate counts characters only; with
    ``spaces=True`` each whitespace run is one space, and a lost space one error. An empty
    reference gives 0.0 for an empty hypothesis, else 1.0.

    Example:
        >>> character_error_rate("Lineage  data", "lineagedata"), character_error_rate("ab", "abcd")
        (0.0, 0.5)
        >>> character_error_rate("lineage  data", "lineage data", spaces=True)
        0.0
        >>> round(character_error_rate("lineagedata", "lineage data", spaces=True), 3)
        0.083
    """
    import Levenshtein

    sep = " " if spaces else ""
    hyp = sep.join(hypothesis.split()).casefold()
    ref = sep.join(reference.split()).casefold()
    if not ref:
        return 0.0 if not hyp else 1.0
    return Levenshtein.distance(hyp, ref) / len(ref)


def word_similarity(hypothesis: str, reference: str) -> float:
    r"""How alike two texts are word by word: 1.0 for the same words in the same order.

    Levenshtein's ``ratio`` over the case-folded words of
    :func:`lineage_data.connectors.pdf.normalize_text`. Unlike :func:`character_error_rate` it
    sees lost spaces and the reading order. Two empty texts give 1.0.

    Example:
        >>> word_similarity("Lineage  data\nsets", "lineage data sets")
        1.0
        >>> word_similarity("lineagedata sets", "lineage data sets"), word_similarity("", "a")
        (0.4, 0.0)
    """
    import Levenshtein

    from lineage_data.connectors.pdf import normalize_text

    hyp = normalize_text(hypothesis).casefold().split()
    ref = normalize_text(reference).casefold().split()
    if not hyp and not ref:
        return 1.0
    return float(Levenshtein.ratio(hyp, ref))
