#!/usr/bin/env python3
"""Total generated tokens per second and time to first token at several
numbers of parallel streams, for any llama.cpp-compatible server.

Usage: throughput.py SERVER_BINARY MODEL.gguf [N_PREDICT] [options] [-- EXTRA SERVER FLAGS...]

  --streams 4,8,16   stream counts to measure (default 4,8,16)
  --np N             server slots (default 16)
  --ctx N            context size (default 256 per slot)
  --runs N           runs per stream count (default 3; the median is printed)

Starts the server with --metrics, warms it up, then for each stream count
sends that many streamed /completion requests at once (distinct prompts,
greedy, ignore_eos, N_PREDICT tokens each) and prints generated tokens over
wall time, the median time to the first token, and from /metrics the
decode calls and busy slots per call (counts a busy machine does not move).
Alternate runs of two servers on a quiet machine to compare them.
"""

import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

SUBJECTS = ["Once upon a time", "The little dog", "Tom and Sue went", "One day, a bird",
            "The sun was hot", "A big red ball", "Lily liked to", "In the forest",
            "The cat sat", "Ben had a toy", "It was a rainy day", "The old man",
            "Mia found a box", "At the park", "The fish swam", "A small boat"]


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return r.read().decode()


def metrics(base):
    out = {}
    try:
        for line in get(base, "/metrics").splitlines():
            if line.startswith("llamacpp:"):
                k, v = line[len("llamacpp:"):].split(" ", 1)
                out[k] = float(v)
    except Exception:
        pass
    return out


def stream(base, body):
    """Streams one /completion; returns (seconds to the first token, tokens)."""
    body = dict(body, stream=True)
    req = urllib.request.Request(base + "/completion", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft = None
    n = 0
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            ev = json.loads(line[6:])
            if ttft is None and (ev.get("content") or ev.get("tokens")):
                ttft = time.perf_counter() - t0
            if ev.get("stop"):
                n = ev.get("tokens_predicted", n)
    return (ttft or 0.0), n


def arg(flag, default):
    if flag in sys.argv:
        i = sys.argv.index(flag)
        v = sys.argv[i + 1]
        del sys.argv[i:i + 2]
        return v
    return default


def main():
    extra = []
    if "--" in sys.argv:
        i = sys.argv.index("--")
        extra = sys.argv[i + 1:]
        del sys.argv[i:]
    streams_list = [int(x) for x in arg("--streams", "4,8,16").split(",")]
    n_par = int(arg("--np", "16"))
    ctx = int(arg("--ctx", str(256 * n_par)))
    runs = int(arg("--runs", "3"))
    server, model = sys.argv[1], sys.argv[2]
    n_predict = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [server, "-m", model, "--port", str(port), "-np", str(n_par), "-c", str(ctx),
           "--metrics"] + extra
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(3000):
            try:
                with urllib.request.urlopen(base + "/health") as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        stream(base, {"prompt": "Hello", "n_predict": 4, "temperature": 0})
        print(f"# {server} -np {n_par} -c {ctx} n_predict={n_predict}")
        for streams in streams_list:
            rates, ttfts, decodes, busy = [], [], [], []
            for _ in range(runs):
                results = [None] * streams

                def one(i):
                    body = {"prompt": SUBJECTS[i % len(SUBJECTS)] + " " * (i // len(SUBJECTS)),
                            "n_predict": n_predict, "temperature": 0, "ignore_eos": True,
                            "cache_prompt": False}
                    results[i] = stream(base, body)

                m0 = metrics(base)
                threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
                t0 = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                dt = time.perf_counter() - t0
                m1 = metrics(base)
                n = sum(r[1] for r in results)
                rates.append(n / dt)
                ttfts.append(statistics.median(r[0] for r in results))
                if "n_decode_total" in m1:
                    d = m1["n_decode_total"] - m0.get("n_decode_total", 0)
                    decodes.append(d)
                    busy.append(m1.get("n_busy_slots_per_decode", 0))
            line = (f"streams={streams} total={statistics.median(rates):.2f} tok/s "
                    f"(runs {', '.join(f'{r:.1f}' for r in rates)}) "
                    f"ttft={statistics.median(ttfts) * 1e3:.0f} ms")
            if decodes:
                line += (f" decode_calls={statistics.median(decodes):.0f}"
                         f" tokens_per_call={streams * n_predict / max(statistics.median(decodes), 1):.2f}"
                         f" busy_slots_per_decode(cumulative)={busy[-1]:.2f}")
            print(line, flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
