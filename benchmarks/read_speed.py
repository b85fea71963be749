"""Benchmark: reading a big run folder and building its report, from the JSONL alone and through its columns file.

Writes a temporary run folder of N canary records (128 tokens, ids, token strings, logprobs and
top-2 alternatives: one canonical record serialised once, varied cheaply: 64 distinct completions,
logprobs and alternatives distinct in every record (256 vectors, each record's first value its own:
the worst case for a reader that parses a repeated value once; float32 values, as vLLM and SGLang send
them, or with ``--printed-logprobs`` doubles that are none), a request id and send time per record).
Then, each in its own process so that peak RSS is its own, times ``load_run`` and
``load_run`` + ``build_report`` with the fast reader (all cores; ``--workers``) on a folder of N records
with only its JSONL and on one with its columns file beside it, and with the reference reader
(``reference=True``, one process) at ``--old-records``. Prints records/s, MB/s of JSONL, the end-to-end
report time, peak RSS (the reading process, and it with its workers together), what the columns file buys over the
JSONL, and (``--parsers``) how fast orjson and pyarrow's JSON reader with an explicit schema parse the
same JSONL, with no columns built; deletes the folders.

    python benchmarks/read_speed.py                     # 20,000 records, reference at 2,000
    python benchmarks/read_speed.py --records 200000 --parsers
    python benchmarks/read_speed.py --million           # 1,000,000 records (about 14 GB of JSONL on disk a folder)

Target (issue 50): >= 50,000 records/s, the 1,000,000-record report in < 60 s end to end, < 4 GiB peak.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import psutil  # type: ignore[import-untyped]

from collectors.sidecar import FILES, INDEX, columns_dir
from loadgen.core.record import CanaryRecord

T = 128
LEVELS = (0, 1, 2, 4, 8, 16, 32, 64)
MARK = "@@MARK@@"


def _as_held(values: Any, engine_floats: bool) -> Any:
    """Logprobs as vLLM and SGLang send them, float32 values; else doubles that are none (a server that rounds)."""
    return np.asarray(values, dtype=np.float32).astype(np.float64) if engine_floats else np.asarray(values)


def _pieces(
    seed: int = 0, engine_floats: bool = True
) -> tuple[list[bytes], list[tuple[bytes, bytes]], list[tuple[bytes, bytes, bytes, bytes]], Any]:
    """The record serialised once around its marks; the completion and logprob segments that fill them; the
    same values as numbers and token bytes (``Values``), for the columns file."""
    rng = np.random.default_rng(seed)
    ref = rng.integers(0, 150_000, T)
    completions = []
    comp_ids: list[Any] = []
    comp_tokens: list[list[str]] = []
    lp_values: list[list[float]] = []
    top_values: list[list[float]] = []
    for k in range(64):  # the reference and 63 forks at varied positions
        ids = ref.copy()
        if k:
            at = int(rng.integers(0, T))
            ids[at:] = rng.integers(0, 150_000, T - at)
        toks = [f" w{x}" for x in ids.tolist()]
        seq = b'"token_ids":' + orjson.dumps(ids.tolist()) + b',"tokens":' + orjson.dumps(toks)
        completions.append((seq, b',"text":' + orjson.dumps("".join(toks))))
        comp_ids.append(ids.astype(np.int64))
        comp_tokens.append(toks)
    logprobs = []
    base = -rng.random(T)
    for _ in range(256):  # drift on most, bitwise equal on some
        lp = _as_held(np.minimum(base + rng.normal(0, 1e-3, T) * (rng.random() < 0.8), 0.0), engine_floats)
        second = _as_held(lp - rng.random(T) * 3, engine_floats)
        top = [[["a", v], ["b", w]] for v, w in zip(lp.tolist(), second.tolist(), strict=True)]
        lp_bytes, top_bytes = orjson.dumps(lp.tolist()[1:]), orjson.dumps(top[1:])
        top_pre, top_post = b',"top_logprobs":[[["a",', b'],["b",-2.0]],' + top_bytes[1:]
        logprobs.append((b',"logprobs":[', b"," + lp_bytes[1:], top_pre, top_post))
        lp_values.append(lp.tolist())
        top_values.append([x for pos in top for x in (pos[0][1], pos[1][1])])
    # every field a collector writes (loadgen.core.record), in the record's own type, so that the folder stays
    # what a run writes as the record grows; the marks are where each record's own values go
    fields = CanaryRecord(
        run_id="bench",
        canary_id="c0",
        request_id=MARK,
        phase="sweep",
        level=0,
        inflight_at_send=0,
        sent_at=0.0,
        status="ok",
        latency_s=0.5,
        ttft_s=0.05,
        request={"prompt": "The history of the old harbour town begins with", "max_tokens": T, "temperature": 0},
        finish_reason="length",
        usage={"prompt_tokens": 10, "completion_tokens": T, "total_tokens": T + 10},
        worker="pid1",
        held_at_send=True,
        background_held_at_send=8,
        background_buffered=False,
    ).to_dict()
    fields["level"] = MARK
    own = ("inflight_at_send", "sent_at", "token_ids", "tokens", "logprobs", "top_logprobs", "text")
    head = ("run_id", "canary_id", "request_id", "phase", "level")  # then this record's scalars, then the rest
    record = {k: fields[k] for k in head}
    record |= {"SEQ": MARK} | {k: v for k, v in fields.items() if k not in head and k not in own}
    text = orjson.dumps(record).decode().replace(f'"{MARK}"', MARK).replace(f'"SEQ":{MARK},', MARK)
    top_arr = np.array(top_values, dtype=np.float64)
    top_arr[:, 1] = -2.0  # the first position's second alternative, as the template writes it
    values = Values(np.stack(comp_ids), comp_tokens, np.array(lp_values, dtype=np.float64), top_arr)
    return [p.encode() for p in text.split(MARK)], completions, logprobs, values


@dataclass
class Values:
    """The completions' ids and token bytes, and the logprob vectors' values, as the columns file holds them."""

    ids: Any  # (64, T) int64
    tokens: list[list[str]]  # the token strings per completion
    lp: Any  # (256, T) float64
    top: Any  # (256, 2 T) float64: both alternatives' logprobs, position by position


class ColumnsOut:
    """The columns file of ``canaries.jsonl`` (``collectors.sidecar``), written in bulk in its layout."""

    def __init__(self, run_dir: Path) -> None:
        folder = columns_dir(run_dir / "canaries.jsonl")
        folder.mkdir()
        self.fh = {name: open(folder / name, "wb") for name in FILES}  # noqa: SIM115
        self.fh["altvocab"].write(b'"a"\n"b"\n')  # every position's two alternatives
        self.line = 0
        self.end = 0
        self.vocab: dict[str, int] = {}
        self.codes: dict[int, Any] = {}  # completion -> its tokens' codes, coded when first written

    def add(self, lines: list[bytes], heads: list[bytes], comp: list[int], values: Values, lp: Any, top: Any) -> None:
        n = len(lines)
        rows = np.zeros(n, INDEX)
        lengths = np.array([len(x) for x in lines], dtype=np.int64)
        rows["jsonl_end"] = self.end + np.cumsum(lengths)
        rows["line"] = np.arange(self.line + 1, self.line + n + 1)
        rows["alt_vocab"] = 2  # "a" and "b", every position's two alternatives
        rows["head"] = [len(h) for h in heads]
        rows["n_ids"], rows["n_lp"], rows["n_top"], rows["k"], rows["n_tok"] = T, T, T, 2, T
        sizes = []
        for c in comp:  # the vocabulary in first-seen order, as the collector codes it
            if c not in self.codes:
                before = len(self.vocab)
                self.codes[c] = np.array(
                    [self.vocab.setdefault(t, len(self.vocab)) for t in values.tokens[c]], np.int32
                )
                new = list(self.vocab)[before:]
                self.fh["vocab"].write(b"".join(orjson.dumps(w) + b"\n" for w in new))
            sizes.append(len(self.vocab))
        rows["vocab"] = sizes
        self.end, self.line = int(rows["jsonl_end"][-1]), self.line + n
        self.fh["head"].write(b"".join(heads))
        codes = np.stack([self.codes[c] for c in comp])
        alts = np.tile(np.array([0, 1], np.int32), (n, T))
        for name, arr in (("ids", values.ids[comp]), ("lp", lp), ("top", top), ("alts", alts), ("codes", codes)):
            self.fh[name].write(np.ascontiguousarray(arr).tobytes())
        self.fh["index"].write(rows.tobytes())

    def close(self) -> None:
        for fh in self.fh.values():
            fh.close()


def write_folder(
    run_dir: Path, n: int, *, distinct: bool = True, columns: bool = True, engine_floats: bool = True
) -> int:
    """N records in ``canaries.jsonl`` (half of them the reference completion) and a manifest; the file's size.
    ``distinct``: every record's logprobs its own; else 256 logprob vectors repeat (a nearly invariant run).
    ``columns``: with the columns file the collector writes beside it (else a JSONL-only, older folder).
    ``engine_floats``: logprobs that are float32 values, as engines send them (``_as_held``)."""
    (run_dir / "manifest.json").write_bytes(
        orjson.dumps({"schema": 1, "run_id": "bench", "levels": list(LEVELS), "status": "finished", "endpoint": {}})
    )
    (p0, p1, p2, p3), completions, logprobs, values = _pieces(engine_floats=engine_floats)
    rng = np.random.default_rng(1)
    out = ColumnsOut(run_dir) if columns else None
    with open(run_dir / "canaries.jsonl", "wb") as fh:
        for start in range(0, n, 10_000):
            k = min(10_000, n - start)
            comp = (rng.integers(0, 64, k) * (rng.random(k) < 0.5)).tolist()
            lps = rng.integers(0, 256, k).tolist()
            lines = []
            heads = []
            owns = np.zeros(k)
            for j in range(k):
                i = start + j
                level = LEVELS[i % len(LEVELS)]
                seq, text = completions[comp[j]]
                scalars = b'%d,"inflight_at_send":%d,"sent_at":%.3f' % (level, level, 1.7e9 + i * 1e-3)
                # distinct: the first logprob and alternative of each record is its own number (written as orjson
                # writes it: the reader writes each line again from the columns file and compares)
                own = orjson.dumps(float(_as_held(-((i if distinct else lps[j]) + 1.25) * 1e-9, engine_floats)))
                lp_pre, lp_post, top_pre, top_post = logprobs[lps[j]]
                parts = (p0, b'"r%d"' % i, p1, scalars, p2, seq, lp_pre, own, lp_post, top_pre, own, top_post, text)
                lines.append(b"".join(parts) + b"," + p3 + b"\n")
                if out is not None:
                    heads.append(b"".join((p0, b'"r%d"' % i, p1, scalars, p2, text[1:], b",", p3, b",")))
                    owns[j] = float(own)
            fh.write(b"".join(lines))
            if out is not None:
                lp, top = values.lp[lps].copy(), values.top[lps].copy()
                lp[:, 0] = top[:, 0] = owns
                out.add(lines, heads, comp, values, lp, top)
    if out is not None:
        out.close()
    return (run_dir / "canaries.jsonl").stat().st_size


class TreeRss:
    """The largest sum of RSS over this process and every process under it (the reader's forkserver and its
    workers, which ``RUSAGE_CHILDREN`` does not see: they are not this process's children), sampled every 50 ms
    by a thread."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.05):
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):  # a worker that ended between the listing and the reading
                    total += proc.memory_info().rss
            self.peak = max(self.peak, total)


def measure(run_dir: Path, mode: str, workers: int | None) -> dict[str, float]:
    """One reader in this process: read time, report time, peak RSS of this process and of it with its workers."""
    from collectors.read.runfolder import load_run
    from reports.analysis.build import build_report

    with TreeRss() as tree:
        t0 = time.perf_counter()
        run = load_run(run_dir, reference=mode == "reference", workers=workers)
        t_read = time.perf_counter() - t0
        report = build_report(run)
        t_total = time.perf_counter() - t0
    return {
        "records": float(run.canaries.n),
        "read_s": t_read,
        "report_s": t_total,
        "unique": float(report["overall"]["unique_completions"]),
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "tree_rss_mib": tree.peak / 2**20,
    }


def run_child(run_dir: Path, mode: str, workers: int | None) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--measure", mode, str(run_dir)]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    got: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return got


def parse_floor(path: Path, count: int) -> list[tuple[str, float, float]]:
    """How fast the first ``count`` records of ``path`` are parsed and nothing more, in this process: orjson a line
    at a time, and pyarrow's JSON reader (its threads) with an explicit schema for the sequences it can type (it
    has no type for ``top_logprobs``'s ``[token, logprob]`` pairs, a string beside a number: that field is
    skipped, as an unexpected one). Each entry: the parser, records/s, MB/s of JSONL."""
    import gc
    import io

    import pyarrow as pa
    import pyarrow.json as pj

    with open(path, "rb") as fh:
        lines = [fh.readline() for _ in range(count)]
    data = b"".join(lines)
    got = []
    gc.disable()
    t0 = time.perf_counter()
    for line in lines:
        orjson.loads(line)
    dt = time.perf_counter() - t0
    gc.enable()
    got.append(("orjson.loads, whole line, one process", len(lines) / dt, len(data) / 1e6 / dt))
    schema = pa.schema(
        [
            ("token_ids", pa.list_(pa.int64())),
            ("tokens", pa.list_(pa.string())),
            ("logprobs", pa.list_(pa.float64())),
        ]
    )
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    t0 = time.perf_counter()
    table = pj.read_json(io.BytesIO(data), parse_options=options)
    dt = time.perf_counter() - t0
    got.append(
        (
            f"pyarrow.json.read_json, explicit schema, {pa.cpu_count()} threads",
            table.num_rows / dt,
            len(data) / 1e6 / dt,
        )
    )
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--million", action="store_true", help="1,000,000 records")
    ap.add_argument("--old-records", type=int, default=2_000, help="records for the reference reader")
    ap.add_argument("--workers", type=int, default=None, help="fast reader processes (default: all cores)")
    ap.add_argument("--distinct-only", action="store_true", help="leave out the folder of repeated logprobs")
    ap.add_argument("--printed-logprobs", action="store_true", help="logprobs that are no float32 (held as float64)")
    ap.add_argument("--parsers", action="store_true", help="also time orjson and pyarrow parsing the JSONL alone")
    ap.add_argument("--measure", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure and args.measure[0] == "parsers":  # its own process: a child's peak RSS starts at its parent's
        print(json.dumps(parse_floor(Path(args.measure[1]) / "canaries.jsonl", min(args.records, 20_000))))
        return
    if args.measure:
        print(json.dumps(measure(Path(args.measure[1]), args.measure[0], args.workers)))
        return
    n = 1_000_000 if args.million else args.records
    old_n = min(n, args.old_records)
    print(f"command: {' '.join(sys.argv)}")
    rows = []
    floor: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-read-") as tmp:
        # (reader, records, each record's logprobs its own, the folder has its columns file)
        cases = [
            ("reference", old_n, True, False),  # the reference builder reads the JSONL alone
            ("fast", old_n, True, False),
            ("fast", n, True, False),
            ("fast", n, True, True),
            ("fast", n, False, True),
        ]
        for mode, count, distinct, columns in cases[:4] if args.distinct_only else cases:
            run_dir = (
                Path(tmp) / f"n{count}-{'distinct' if distinct else 'repeated'}-{'columns' if columns else 'jsonl'}"
            )
            if not run_dir.exists():
                run_dir.mkdir()
                t0 = time.perf_counter()
                floats = not args.printed_logprobs
                size = write_folder(run_dir, count, distinct=distinct, columns=columns, engine_floats=floats)
                print(f"wrote {count:,} records, {size / 2**20:,.0f} MiB, in {time.perf_counter() - t0:.1f} s")
            if args.parsers and not floor and count == n and not columns:
                cmd = [sys.executable, __file__, "--measure", "parsers", str(run_dir), "--records", str(n)]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                floor = [tuple(x) for x in json.loads(out.strip().splitlines()[-1])]
            size = (run_dir / "canaries.jsonl").stat().st_size
            got = run_child(run_dir, mode, None if mode == "reference" else args.workers)
            rows.append((mode, "columns file" if columns else "JSONL", count, distinct, size, got))
            if count == n and n > old_n:
                shutil.rmtree(run_dir)  # a million records are 14 GB: one folder on disk at a time
    print(
        "\n| reader | read from | logprobs | records | records/s | MB/s of JSONL | read s | report end to end s "
        "| peak RSS MiB (reader / with its workers) |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for mode, source, count, distinct, size, g in rows:
        print(
            f"| {mode} | {source} | {'each record its own' if distinct else '256 vectors repeat'} | {count:,} "
            f"| {g['records'] / g['read_s']:,.0f} | {size / 1e6 / g['read_s']:,.0f} "
            f"| {g['read_s']:.2f} | {g['report_s']:.2f} | {g['rss_mib']:,.0f} / {g['tree_rss_mib']:,.0f} |"
        )
    ref, fast_small, jsonl, cols = (r[5] for r in rows[:4])
    print(
        f"\nat {old_n:,} records: fast / reference JSONL = {ref['read_s'] / fast_small['read_s']:.1f}x read; "
        f"unique completions {int(ref['unique'])} (reference) vs {int(fast_small['unique'])} (fast)"
    )
    print(
        f"at {n:,} records: columns file / JSONL = {jsonl['read_s'] / cols['read_s']:.2f}x read, "
        f"{jsonl['report_s'] / cols['report_s']:.2f}x end to end; unique completions {int(jsonl['unique'])} (JSONL) "
        f"vs {int(cols['unique'])} (columns file)"
    )
    for name, per_s, mb_s in floor:
        print(f"parsing alone, {min(n, 20_000):,} records: {name}: {per_s:,.0f} records/s, {mb_s:,.0f} MB/s")


if __name__ == "__main__":
    main()
