"""VllmStage against recording fakes of vLLM's offline interface: no GPU, no vLLM, no Ray."""

from __future__ import annotations

import dataclasses
import io
import sys
import types

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from lineage_data._core.failures import RecordFailure
from lineage_data.connectors.echo_llm import EchoLLM
from lineage_data.connectors.vllm import (
    NUM_GENERATED_TOKENS,
    NUM_PROMPT_TOKENS,
    VllmStage,
)


def encode(size: tuple[int, int], fmt: str = "PNG", mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, "white" if mode != "RGBA" else (0, 0, 0, 0)).save(buffer, format=fmt)
    return buffer.getvalue()


class RecordingLLM(EchoLLM):
    """EchoLLM that records what reaches it; ``edit`` may rewrite the outputs of a call."""

    instances: list[RecordingLLM] = []

    def __init__(self, model: str = "echo", **engine_kwargs):
        super().__init__(model, **engine_kwargs)
        self.calls: list[dict] = []
        self.edit = None
        self.error: BaseException | None = None
        RecordingLLM.instances.append(self)

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True):
        self.calls.append(
            {"prompts": list(prompts), "sampling_params": sampling_params, "use_tqdm": use_tqdm}
        )
        if self.error is not None:
            raise self.error
        outputs = super().generate(prompts, sampling_params, use_tqdm=use_tqdm)
        return self.edit(outputs) if self.edit else outputs


@pytest.fixture(autouse=True)
def _fresh_instances():
    RecordingLLM.instances.clear()


def make_stage(**kwargs) -> tuple[VllmStage, RecordingLLM]:
    kwargs.setdefault("llm_factory", RecordingLLM)
    stage = VllmStage("test-model", **kwargs)
    return stage, RecordingLLM.instances[-1]


def without_text(completion):
    return dataclasses.replace(completion, text=None)


def with_finish_reason(output, reason):
    completion = dataclasses.replace(output.outputs[0], finish_reason=reason)
    return dataclasses.replace(output, outputs=[completion])


# --- order and shape ------------------------------------------------------------------------------


def test_mixed_parent_batch_keeps_row_order():
    # children of three parents interleaved, as an actor-pool batch mixes them
    keys = [("doc-b", 2), ("doc-a", 0), ("doc-c", 5), ("doc-a", 1), ("doc-b", 0), ("doc-c", 1)]
    sizes = [(10 + i, 20 + 2 * i) for i in range(len(keys))]
    batch = pa.table(
        {
            "image": [encode(size) for size in sizes],
            "text": [f"{doc} page {page}" for doc, page in keys],
        }
    )
    stage, llm = make_stage(prompt_template="caption {text}")
    result = stage(batch)
    assert result["generation"] == [
        f"echo [image {w}x{h}]: caption {doc} page {page}"
        for (doc, page), (w, h) in zip(keys, sizes, strict=True)
    ]
    assert len(llm.calls) == 1  # the whole batch in one generate call
    assert [p["prompt"] for p in llm.calls[0]["prompts"]] == [
        f"caption {doc} page {page}" for doc, page in keys
    ]


def test_outputs_returned_out_of_order_are_refused():
    batch = pa.table({"text": ["a", "b", "c"]})
    stage, llm = make_stage(image_column=None)
    llm.edit = lambda outputs: outputs[::-1]
    with pytest.raises(RuntimeError, match="out of order"):
        stage(batch)


def test_outputs_for_other_prompts_are_refused():
    batch = pa.table({"text": ["a", "b"]})
    stage, llm = make_stage(image_column=None)
    llm.edit = lambda outputs: [dataclasses.replace(o, prompt="zzz") for o in outputs]
    with pytest.raises(RuntimeError, match="answers prompt 'zzz'"):
        stage(batch)


def test_missing_outputs_fail_the_batch():
    batch = pa.table({"text": ["a", "b", "c"]})
    stage, llm = make_stage(image_column=None)
    llm.edit = lambda outputs: outputs[:2]
    with pytest.raises(RuntimeError, match="2 outputs for 3 prompts"):
        stage(batch)


def test_token_counts():
    stage, _ = make_stage(image_column=None, sampling_params={"max_tokens": 4})
    result = stage(pa.table({"text": ["hello", "hi"]}))
    assert result["generation"] == ["echo", "echo"]
    assert result[NUM_PROMPT_TOKENS] == [5, 2]
    assert result[NUM_GENERATED_TOKENS] == [4, 4]


def test_empty_batch_does_not_call_the_engine():
    stage, llm = make_stage()
    empty = pa.table({"image": pa.array([], pa.binary()), "text": pa.array([], pa.string())})
    result = stage(empty)
    assert result == {"generation": [], NUM_PROMPT_TOKENS: [], NUM_GENERATED_TOKENS: []}
    assert llm.calls == []


def test_mapping_batch_is_accepted():
    stage, _ = make_stage(image_column=None)
    assert stage({"text": ["x", "y"]})["generation"] == ["echo: x", "echo: y"]


# --- multimodal inputs ----------------------------------------------------------------------------


def test_each_row_gets_its_own_decoded_image():
    images = [encode((31, 17), "PNG"), encode((64, 48), "JPEG"), encode((8, 9), "PNG", "RGBA")]
    stage, llm = make_stage()
    stage(pa.table({"image": images, "text": ["a", "b", "c"]}))
    sent = [p["multi_modal_data"]["image"] for p in llm.calls[0]["prompts"]]
    assert all(isinstance(image, Image.Image) for image in sent)
    assert [image.size for image in sent] == [(31, 17), (64, 48), (8, 9)]
    assert {image.mode for image in sent} == {"RGB"}


def test_clip_frames_become_an_image_list():
    clip = [encode((40 + i, 30), "JPEG") for i in range(3)]
    stage, llm = make_stage(image_column=None, frames_column="frames", prompt_template="{text}")
    result = stage(pa.table({"frames": [clip, clip[:1]], "text": ["clip 0", "clip 1"]}))
    first, second = (p["multi_modal_data"]["image"] for p in llm.calls[0]["prompts"])
    assert [f.size for f in first] == [(40, 30), (41, 30), (42, 30)]
    assert isinstance(second, Image.Image)  # one frame: a single image, as vLLM documents
    assert result["generation"][0] == "echo [image 40x30, image 41x30, image 42x30]: clip 0"


def test_clip_frames_as_video():
    clip = [encode((16, 12), "JPEG") for _ in range(4)]
    stage, llm = make_stage(image_column=None, frames_column="frames", frames_as="video")
    result = stage(pa.table({"frames": [clip], "text": ["a clip"]}))
    [prompt] = llm.calls[0]["prompts"]
    assert [f.size for f in prompt["multi_modal_data"]["video"]] == [(16, 12)] * 4
    assert "image" not in prompt["multi_modal_data"]
    assert result["generation"] == ["echo [video 4x16x12]: a clip"]


def test_pages_and_clips_in_one_batch():
    clip = [encode((5, 5), "JPEG"), encode((6, 6), "JPEG")]
    batch = pa.table(
        {
            "image": [encode((3, 4)), None],
            "frames": pa.array([None, clip], pa.list_(pa.binary())),
            "text": ["page", "clip"],
        }
    )
    stage, _ = make_stage(frames_column="frames")
    assert stage(batch)["generation"] == [
        "echo [image 3x4]: page",
        "echo [image 5x5, image 6x6]: clip",
    ]


def test_text_only_prompts_carry_no_multimodal_data():
    stage, llm = make_stage(image_column=None, prompt_template="{title}: {body}")
    stage(pa.table({"title": ["T"], "body": ["B"], "other": [1]}))
    assert llm.calls[0]["prompts"] == [{"prompt": "T: B"}]


# --- per-row failures -----------------------------------------------------------------------------


def test_undecodable_image_fails_only_its_row():
    images = [encode((4, 4)), b"not an image", encode((5, 5))]
    batch = pa.table({"image": images, "text": list("abc")})
    stage, llm = make_stage()
    result = stage(batch)
    ok_a, failed, ok_c = result["generation"]
    assert isinstance(failed, RecordFailure)
    assert "does not decode" in failed.cause
    assert "UnidentifiedImageError" in failed.cause
    assert (ok_a, ok_c) == ("echo [image 4x4]: a", "echo [image 5x5]: c")
    assert [p["prompt"] for p in llm.calls[0]["prompts"]] == ["a", "c"]
    assert result[NUM_PROMPT_TOKENS][1] is None


def test_truncated_frame_fails_its_clip():
    good = encode((8, 8), "JPEG")
    stage, _ = make_stage(image_column=None, frames_column="frames")
    result = stage(pa.table({"frames": [[good, good[:40]], [good]], "text": ["x", "y"]}))
    assert isinstance(result["generation"][0], RecordFailure)
    assert "frame 1" in result["generation"][0].cause
    assert result["generation"][1] == "echo [image 8x8]: y"


def test_row_without_image_fails():
    stage, llm = make_stage()
    result = stage(pa.table({"image": [None, encode((2, 2))], "text": ["x", "y"]}))
    assert isinstance(result["generation"][0], RecordFailure)
    assert "no image" in result["generation"][0].cause
    assert len(llm.calls[0]["prompts"]) == 1


def test_value_that_does_not_fit_the_template_fails_its_row():
    stage, _ = make_stage(image_column=None, prompt_template="page {n:d}")
    result = stage(pa.table({"n": pa.array([3, None])}))
    assert result["generation"][0] == "echo: page 3"
    assert isinstance(result["generation"][1], RecordFailure)


@pytest.mark.parametrize("reason", ["error", "abort"])
def test_failed_finish_reason_becomes_record_failure(reason):
    stage, llm = make_stage(image_column=None)
    llm.edit = lambda outs: [outs[0], with_finish_reason(outs[1], reason), outs[2]]
    result = stage(pa.table({"text": ["a", "b", "c"]}))
    a, b, c = result["generation"]
    assert (a, c) == ("echo: a", "echo: c")
    assert b == RecordFailure(f"VllmStage: the request finished with {reason!r}")


def test_length_finish_reason_is_a_value():
    stage, _ = make_stage(image_column=None, sampling_params={"max_tokens": 2})
    assert stage(pa.table({"text": ["abc"]}))["generation"] == ["ec"]


@pytest.mark.parametrize(
    ("edit", "cause"),
    [
        (lambda o: dataclasses.replace(o, outputs=[]), "no completion"),
        (lambda o: dataclasses.replace(o, finished=False), "did not finish"),
        (lambda o: dataclasses.replace(o, outputs=[without_text(o.outputs[0])]), "no text"),
        (lambda o: ValueError("prompt too long"), "ValueError: prompt too long"),
    ],
)
def test_unusable_output_becomes_record_failure(edit, cause):
    stage, llm = make_stage(image_column=None)
    llm.edit = lambda outs: [edit(outs[0]), outs[1]]
    result = stage(pa.table({"text": ["a", "b"]}))
    assert isinstance(result["generation"][0], RecordFailure)
    assert cause in result["generation"][0].cause
    assert result["generation"][1] == "echo: b"


# --- engine construction, sampling params, engine errors -----------------------------------------


def test_constructor_kwargs_reach_the_engine_factory():
    seen = {}

    def factory(**kwargs):
        seen.update(kwargs)
        return EchoLLM(**kwargs)

    VllmStage("/models/m", engine_kwargs={"max_model_len": 2048, "seed": 7}, llm_factory=factory)
    assert seen == {"model": "/models/m", "max_model_len": 2048, "seed": 7}


def test_sampling_params_reach_generate():
    made = []

    def sampling_params_factory(**kwargs):
        made.append(kwargs)
        return types.SimpleNamespace(**kwargs)

    stage, llm = make_stage(
        image_column=None,
        sampling_params={"max_tokens": 3, "temperature": 0.0},
        sampling_params_factory=sampling_params_factory,
    )
    stage(pa.table({"text": ["a"]}))
    stage(pa.table({"text": ["b"]}))
    assert made == [{"max_tokens": 3, "temperature": 0.0}]  # built once per actor
    assert llm.calls[0]["sampling_params"] is llm.calls[1]["sampling_params"]
    assert llm.calls[0]["sampling_params"].max_tokens == 3
    assert llm.calls[0]["use_tqdm"] is False


def test_without_sampling_params_the_engine_defaults_apply():
    stage, llm = make_stage(image_column=None)
    stage(pa.table({"text": ["a"]}))
    assert llm.calls[0]["sampling_params"] is None


def test_default_factories_are_vllm_llm_and_sampling_params(monkeypatch):
    fake_vllm = types.ModuleType("vllm")
    fake_vllm.LLM = RecordingLLM
    fake_vllm.SamplingParams = lambda **kw: ("SamplingParams", kw)
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)
    stage = VllmStage(
        "m", image_column=None, sampling_params={"max_tokens": 5}, engine_kwargs={"dtype": "half"}
    )
    stage(pa.table({"text": ["a"]}))
    [llm] = RecordingLLM.instances
    assert (llm.model, llm.engine_kwargs) == ("m", {"dtype": "half"})
    assert llm.calls[0]["sampling_params"] == ("SamplingParams", {"max_tokens": 5})


def test_missing_vllm_gives_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"pip install 'lineage-data\[vllm\]'"):
        VllmStage("m")


def test_engine_exception_propagates():
    stage, llm = make_stage(image_column=None)
    llm.error = RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(RuntimeError, match="illegal memory access"):
        stage(pa.table({"text": ["a", "b"]}))


def test_dead_engine_propagates_and_is_replaced_for_the_next_batch():
    class EngineDeadError(Exception):  # vLLM's class is matched by name
        pass

    stage, first = make_stage(image_column=None)
    first.error = EngineDeadError("EngineCore encountered an issue.")
    with pytest.raises(EngineDeadError):
        stage(pa.table({"text": ["a"]}))
    assert stage(pa.table({"text": ["b"]}))["generation"] == ["echo: b"]
    assert len(RecordingLLM.instances) == 2


def test_other_engine_errors_keep_the_engine():
    stage, llm = make_stage(image_column=None)
    llm.error = ValueError("The decoder prompt is longer than the maximum model length")
    with pytest.raises(ValueError, match="maximum model length"):
        stage(pa.table({"text": ["a"]}))
    llm.error = None
    stage(pa.table({"text": ["b"]}))
    assert len(RecordingLLM.instances) == 1


# --- configuration errors -------------------------------------------------------------------------


def test_missing_column_fails_the_batch():
    stage, _ = make_stage(prompt_template="{caption}")
    with pytest.raises(ValueError, match=r"no column \['caption'\]"):
        stage(pa.table({"image": [encode((2, 2))]}))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prompt_template": "{} page"}, "must name columns"),
        ({"prompt_template": "{a} {b}", "text_columns": ["a"]}, r"\['b'\]"),
        ({"prompt_template": "{image}"}, "media column"),
        ({"frames_as": "gif"}, "frames_as"),
        ({"output_column": NUM_PROMPT_TOKENS}, "clashes"),
    ],
)
def test_contradictory_options_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        VllmStage("m", llm_factory=EchoLLM, **kwargs)


# --- one output row per input row, whatever the rows --------------------------------------------

ROW_KINDS = ["good", "undecodable", "no image", "engine error", "engine abort"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(ROW_KINDS), max_size=12))
def test_one_output_row_per_input_row(kinds):
    good = encode((3, 3))
    images = {"good": good, "undecodable": b"\x89PNG broken", "no image": None}
    batch = pa.table(
        {
            "image": pa.array([images.get(kind, good) for kind in kinds], pa.binary()),
            "text": pa.array([f"{i} {kind}" for i, kind in enumerate(kinds)], pa.string()),
        }
    )
    stage, llm = make_stage()

    def edit(outputs):
        reasons = {"engine error": "error", "engine abort": "abort"}
        return [
            with_finish_reason(o, reasons[o.prompt.split(" ", 1)[1]])
            if o.prompt.split(" ", 1)[1] in reasons
            else o
            for o in outputs
        ]

    llm.edit = edit
    result = stage(batch)
    assert {len(column) for column in result.values()} == {len(kinds)}
    assert len(result) == 3
    for i, (kind, value) in enumerate(zip(kinds, result["generation"], strict=True)):
        if kind == "good":
            assert value == f"echo [image 3x3]: {i} good"
        else:
            assert isinstance(value, RecordFailure)


# --- EchoLLM checks inputs the way vLLM documents them -------------------------------------------


@pytest.mark.parametrize(
    "prompt",
    [
        {"prompt": 3},
        {"prompt": "x", "images": []},
        {"prompt": "x", "multi_modal_data": {"image": b"png bytes"}},
        {"prompt": "x", "multi_modal_data": {"image": []}},
        {"prompt": "x", "multi_modal_data": {"audio": [0.0]}},
        {"prompt": "x", "multi_modal_data": {"video": "clip.mp4"}},
        ["x"],
    ],
)
def test_echo_llm_rejects_wrong_shapes(prompt):
    with pytest.raises(TypeError):
        EchoLLM().generate([prompt])


def test_echo_llm_enforces_limit_mm_per_prompt():
    llm = EchoLLM(limit_mm_per_prompt={"image": 1})
    two = [Image.new("RGB", (2, 2))] * 2
    with pytest.raises(ValueError, match="limit_mm_per_prompt"):
        llm.generate({"prompt": "x", "multi_modal_data": {"image": two}})


def test_echo_llm_request_ids_increase_across_calls():
    llm = EchoLLM()
    ids = [o.request_id for o in llm.generate(["a", "b"]) + llm.generate("c")]
    assert ids == ["0", "1", "2"]


# --- the GPU check script -------------------------------------------------------------------------


def test_gpu_check_runs_with_the_fake_engine(capsys):
    from examples.gpu_check import main

    assert main(["--fake", "--num-images", "3"]) == 0
    out = capsys.readouterr().out
    assert "[2] 'echo [image 288x256]" in out
    assert "0 failed" in out


def test_gpu_check_without_vllm_says_so_and_succeeds(monkeypatch, capsys):
    from examples.gpu_check import main

    monkeypatch.setitem(sys.modules, "vllm", None)
    assert main(["--model", "/nonexistent"]) == 0
    assert "vLLM is not installed" in capsys.readouterr().out
