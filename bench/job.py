"""``job``: the installed PDF job as a user runs it, S3 in, S3 out, default options.

Starts a local S3 server (SeaweedFS on loopback), uploads a generated long-tailed PDF corpus (text
layer), runs ``lineage-data pdf s3://.../in s3://.../out`` in a process of its own (its own local Ray,
as a user's shell would), stamps every line the command prints as it arrives, and reads the manifest
afterwards. Measures: the command's wall, when the first shard was committed (``first_shard_frac``:
its commit time over the wall; the goal is <= 0.30 for a job of a minute or more), how many shards
were committed before the last document was done, and whether the documents-done count moved during
the run (the progress lines).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import code_version, log, stamp
from bench.measure import results_path, write_json

SCALES = {
    "smoke": {"pdfs": 12, "max_pages": 40, "mean_pages": 8},
    "small": {"pdfs": 900, "max_pages": 427, "mean_pages": 47},  # a job of a minute or more
    "full": {"pdfs": 2000, "max_pages": 427, "mean_pages": 47},
}
BUCKET = "corpus"
_DONE = re.compile(r"lineage: (\d+)(?: of (\d+))? documents done")


def _read(stream: Any, lines: list[tuple[float, str]]) -> None:
    for line in stream:
        lines.append((time.time(), line.rstrip("\n")))


def run(scale: str, out_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """Run the job once; write the JSON; return the headline."""
    from lineage_data.connectors.shards import read_manifest
    from lineage_data.connectors.testing.corpus import write_corpus
    from lineage_data.connectors.testing.seaweed import SeaweedServer

    conf = SCALES[scale]
    work = Path(tempfile.mkdtemp(prefix="bench-job-"))
    with SeaweedServer(work / "s3", auth=True) as server:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(server.env)
        os.environ.update(server.env)  # this process reads the corpus and the manifest too
        server.make_bucket(BUCKET)
        corpus = write_corpus(
            f"s3://{BUCKET}/in",
            n_pdfs=conf["pdfs"],
            seed=seed,
            max_pages=conf["max_pages"],
            mean_pages=conf["mean_pages"],
        )
        pages = sum(f.get("pages") or 0 for f in corpus["files"])
        out = f"s3://{BUCKET}/out"
        command = [
            str(Path(sys.executable).parent / "lineage-data"),
            "pdf",
            f"s3://{BUCKET}/in/pdfs/",
            out,
        ]
        log(f"job/{scale}: {len(corpus['files'])} PDFs, {pages} pages: {' '.join(command[1:])}")
        lines: list[tuple[float, str]] = []
        started = time.time()
        proc = subprocess.Popen(
            command, cwd=work, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        readers = [
            threading.Thread(target=_read, args=(stream, lines), daemon=True)
            for stream in (proc.stdout, proc.stderr)
        ]
        for reader in readers:
            reader.start()
        code = proc.wait()
        ended = time.time()
        for reader in readers:
            reader.join(10)
        if code != 0:
            raise RuntimeError(f"the job failed ({code}):\n" + "\n".join(t for _, t in lines[-40:]))
        shards = read_manifest(out).shards
    wall = ended - started
    commits = sorted(e.committed_at - started for e in shards)
    done = [(t - started, int(m.group(1))) for t, text in lines if (m := _DONE.search(text))]
    total = len(corpus["files"])
    moved = sorted({n for _, n in done if 0 < n < total})
    last_done = next((t for t, n in done if n >= total), wall)
    headline = {
        "bench": "job",
        "scale": scale,
        "wall_s": round(wall, 2),
        "first_shard_s": round(commits[0], 2),
        "first_shard_frac": round(commits[0] / wall, 4),
        "shards": len(shards),
        "shards_before_last_document_done": sum(1 for c in commits if c < last_done),
        "documents_done_counts_seen_during_the_run": len(moved),
    }
    data = {
        "bench": "job",
        "scale": scale,
        "seed": seed,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "code": code_version(),
        "command": " ".join(command[1:]),
        "corpus": {"pdfs": total, "pages": pages},
        "shard_commits_s": [round(c, 2) for c in commits],
        "progress_lines": [
            [round(t - started, 2), text] for t, text in lines if "lineage:" in text
        ],
        "summary_lines": [text for _, text in lines if not text.startswith("lineage:")][-20:],
        "notes": (__doc__ or "").strip(),
        "headline": headline,
    }
    path = results_path(out_dir, "job", scale, "json", stamp())
    write_json(path, data)
    log(f"wrote {path}")
    return headline
