#!/usr/bin/env python3
"""Total generated tokens per second at several numbers of parallel streams,
and the time to first token of a request that shares a long prefix with
the one before, for llama.cpp-compatible servers, driven the same way.

Usage: throughput.py MODEL.gguf --server NAME=BINARY [--server NAME=BINARY ...]
                     [options] [-- EXTRA SERVER FLAGS...]

  --server NAME=BINARY  a server to measure (repeat to compare several)
  --n-predict N         tokens generated per stream (default 64)
  --streams 1,4,8,16    stream counts to measure (default 1,4,8,16)
  --np N                server slots (default 16)
  --ctx N               context size (default 256 per slot)
  --threads N           -t of every server (default 2)
  --rounds N            rounds (default 3)
  --ttft N              also measure the time to first token of a request
                        sharing an N-token prefix with the one before, on a
                        server of one slot (0: off)

Each round starts every server in turn (the order alternates from round to
round, and only one runs at a time), warms it up, measures every stream
count once (that many streamed /completion requests at once: distinct
prompts, greedy, ignore_eos, no prompt cache), then stops it; with --ttft
it then starts the server with one slot and times the first token of a
request on an N-token prefix (nothing cached) and of one sharing that
prefix with another ending. Printed per server and
stream count: every round's total generated tokens over wall time (the
scatter), their median, and from /metrics the decode calls (counts a busy
machine does not move). On a shared machine the figures move with the
load: compare medians of alternated rounds, not single runs.
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

WORDS = ("river stone garden window yellow quiet market winter candle bridge forest "
         "silver letter morning orange pocket thunder basket mirror ladder").split()


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return r.read().decode()


def post(base, path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read().decode())


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


def arg(flag, default, many=False):
    vals = []
    while flag in sys.argv:
        i = sys.argv.index(flag)
        vals.append(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    if many:
        return vals
    return vals[-1] if vals else default


class Server:
    def __init__(self, binary, model, n_par, ctx, threads, extra):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        cmd = [binary, "-m", model, "--port", str(self.port), "-np", str(n_par), "-c", str(ctx),
               "-t", str(threads), "--metrics"] + extra
        self.proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        for _ in range(6000):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{binary} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.base + "/health") as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        stream(self.base, {"prompt": "Hello", "n_predict": 4, "temperature": 0})

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def run_streams(srv, streams, n_predict):
    results = [None] * streams

    def one(i):
        body = {"prompt": SUBJECTS[i % len(SUBJECTS)] + " " * (i // len(SUBJECTS)),
                "n_predict": n_predict, "temperature": 0, "ignore_eos": True,
                "cache_prompt": False}
        results[i] = stream(srv.base, body)

    m0 = metrics(srv.base)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    m1 = metrics(srv.base)
    n = sum(r[1] for r in results)
    decodes = None
    if "n_decode_total" in m1:
        decodes = m1["n_decode_total"] - m0.get("n_decode_total", 0)
    return n / dt, n, decodes


def prefix_tokens(srv, n):
    """n tokens of plain text, as the server tokenizes it."""
    words = [WORDS[(i * 7 + i // 5) % len(WORDS)] for i in range(2 * n)]
    toks = post(srv.base, "/tokenize", {"content": " ".join(words)})["tokens"]
    toks = [t if isinstance(t, int) else t["id"] for t in toks]
    if len(toks) < n:
        raise RuntimeError(f"the text has {len(toks)} tokens, fewer than {n}")
    return toks[:n]


def run_ttft(srv, n):
    """Time to first token of a request on an n-token prefix (nothing
    cached), then of one sharing that prefix (another ending)."""
    pre = prefix_tokens(srv, n)
    tail = post(srv.base, "/tokenize", {"content": " and then"})["tokens"]
    tail2 = post(srv.base, "/tokenize", {"content": " but later"})["tokens"]
    body = {"n_predict": 4, "temperature": 0, "ignore_eos": True, "cache_prompt": True,
            "id_slot": 0}
    cold, _ = stream(srv.base, dict(body, prompt=pre + tail))
    warm, _ = stream(srv.base, dict(body, prompt=pre + tail2))
    return cold, warm


def main():
    extra = []
    if "--" in sys.argv:
        i = sys.argv.index("--")
        extra = sys.argv[i + 1:]
        del sys.argv[i:]
    servers = [s.split("=", 1) for s in arg("--server", None, many=True)]
    if not servers or any(len(s) != 2 for s in servers):
        sys.exit("give at least one --server NAME=BINARY")
    n_predict = int(arg("--n-predict", "64"))
    streams_list = [int(x) for x in arg("--streams", "1,4,8,16").split(",")]
    n_par = int(arg("--np", "16"))
    ctx = int(arg("--ctx", str(256 * n_par)))
    threads = int(arg("--threads", "2"))
    rounds = int(arg("--rounds", "3"))
    ttft_n = int(arg("--ttft", "0"))
    model = sys.argv[1]
    rates = {(name, s): [] for name, _ in servers for s in streams_list}
    decodes = {(name, s): [] for name, _ in servers for s in streams_list}
    ttfts = {name: [] for name, _ in servers}
    print(f"# {model} -np {n_par} -c {ctx} -t {threads} n_predict={n_predict} "
          f"rounds={rounds} {' '.join(extra)}", flush=True)
    for r in range(rounds):
        order = servers if r % 2 == 0 else list(reversed(servers))
        for name, binary in order:
            srv = Server(binary, model, n_par, ctx, threads, extra)
            try:
                for s in streams_list:
                    rate, n, d = run_streams(srv, s, n_predict)
                    rates[(name, s)].append(rate)
                    if d is not None:
                        decodes[(name, s)].append(d)
                    print(f"round {r} {name} streams={s} {rate:.1f} tok/s ({n} tokens)",
                          flush=True)
            finally:
                srv.stop()
            if not ttft_n:
                continue
            # One slot whose context holds the prefix.
            srv = Server(binary, model, 1, ttft_n + 256, threads, extra)
            try:
                cold, warm = run_ttft(srv, ttft_n)
                ttfts[name].append((cold, warm))
                print(f"round {r} {name} ttft prefix={ttft_n} cold={cold * 1e3:.0f} ms "
                      f"warm={warm * 1e3:.0f} ms ({cold / max(warm, 1e-9):.1f}x)", flush=True)
            finally:
                srv.stop()
    print("# summary: median total tok/s (every round)")
    for s in streams_list:
        line = f"streams={s:<3}"
        for name, _ in servers:
            rs = rates[(name, s)]
            line += f" {name}={statistics.median(rs):.1f} ({', '.join(f'{x:.1f}' for x in rs)})"
            if decodes[(name, s)]:
                line += f" decodes={statistics.median(decodes[(name, s)]):.0f}"
        if len(servers) == 2:
            a, b = (statistics.median(rates[(n, s)]) for n, _ in servers)
            line += f" ratio={a / max(b, 1e-9):.2f}"
        print(line)
    for name, _ in servers:
        if ttfts[name]:
            cold = statistics.median(c for c, _ in ttfts[name])
            warm = statistics.median(w for _, w in ttfts[name])
            print(f"ttft {name}: cold {cold * 1e3:.0f} ms, warm {warm * 1e3:.0f} ms, "
                  f"cut {cold / max(warm, 1e-9):.1f}x (rounds "
                  + ", ".join(f"{c * 1e3:.0f}/{w * 1e3:.0f}" for c, w in ttfts[name]) + ")")


if __name__ == "__main__":
    main()
