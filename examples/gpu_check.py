r"""Check VllmStage on one machine, without Ray: a few synthetic images through one engine.

    python examples/gpu_check.py --model /models/llava-1.5-7b-hf     # real vLLM, one GPU
    python examples/gpu_check.py --fake                                # EchoLLM, CPU only

It prints one generation per image and the throughput of the batch. Where vLLM is not installed
(and ``--fake`` is not given) it says so and exits 0. The prompt template must follow the model's
own prompt format; the default is LLaVA-1.5's ``"USER: <image>\n{text}\nASSISTANT:"``.
Exit status: 0 when every row produced text, 1 when a row failed, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

DEFAULT_TEMPLATE = "USER: <image>\n{text}\nASSISTANT:"
QUESTION = "Describe this picture in one sentence."


def synthetic_images(n: int) -> list[bytes]:
    """``n`` encoded test pictures of different sizes and colours, PNG and JPEG alternately."""
    from PIL import Image, ImageDraw

    images = []
    for i in range(n):
        width, height = 224 + 32 * (i % 4), 160 + 48 * (i % 3)
        image = Image.new("RGB", (width, height), (40 * i % 256, 90, 200 - 20 * i % 200))
        draw = ImageDraw.Draw(image)
        draw.rectangle((width // 4, height // 4, width // 2, height // 2), fill=(250, 250, 30))
        draw.ellipse((width // 2, height // 3, width - 10, height - 10), fill=(20, 160, 60))
        buffer = io.BytesIO()
        image.save(buffer, format="PNG" if i % 2 == 0 else "JPEG")
        images.append(buffer.getvalue())
    return images


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="local model directory (needed unless --fake)")
    parser.add_argument("--fake", action="store_true", help="use EchoLLM instead of vLLM")
    parser.add_argument("--num-images", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompt-template", default=DEFAULT_TEMPLATE)
    parser.add_argument(
        "--engine-kwargs",
        default='{"max_model_len": 4096}',
        help="JSON object of extra vllm.LLM keyword arguments",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if __package__ in (None, ""):  # run as a file: make the repository root importable
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import pyarrow as pa

    from lineage_data._core.failures import RecordFailure
    from lineage_data.connectors.echo_llm import EchoLLM
    from lineage_data.connectors.vllm import NUM_GENERATED_TOKENS, VllmStage

    factory = None
    model = args.model or "echo"
    if args.fake:
        factory = EchoLLM
    else:
        try:
            import vllm
        except ImportError:
            print(
                "gpu_check: vLLM is not installed here, so there is nothing to check on a GPU. "
                "Install it with: pip install 'lineage-data[vllm]' (or run with --fake)."
            )
            return 0
        if args.model is None or not Path(args.model).exists():
            print(f"gpu_check: --model must name a local model directory (got {args.model!r})")
            return 2
        print(f"gpu_check: vLLM {vllm.__version__}, model {args.model}")

    rows = synthetic_images(args.num_images)
    batch = pa.table({"image": rows, "text": [QUESTION] * len(rows)})
    started = time.perf_counter()
    stage = VllmStage(
        model,
        prompt_template=args.prompt_template,
        sampling_params={"max_tokens": args.max_tokens, "temperature": 0.0},
        engine_kwargs=json.loads(args.engine_kwargs),
        llm_factory=factory,
    )
    built = time.perf_counter()
    result = stage(batch)
    done = time.perf_counter()

    failed = 0
    for index, text in enumerate(result["generation"]):
        if isinstance(text, RecordFailure):
            failed += 1
            print(f"[{index}] FAILED {text.cause}")
        else:
            print(f"[{index}] {text[:120]!r}")
    seconds = done - built
    tokens = sum(n or 0 for n in result[NUM_GENERATED_TOKENS])
    print(
        f"gpu_check: engine ready in {built - started:.1f} s; {len(rows)} rows in {seconds:.2f} s "
        f"= {len(rows) / seconds:.1f} rows/s, {tokens / seconds:.0f} generated tokens/s; "
        f"{failed} failed"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
