#!/usr/bin/env python3
"""Total generated tokens per second with 1, 2 and 4 parallel streams.

Usage: throughput.py SERVER_BINARY MODEL.gguf [N_PREDICT] [EXTRA SERVER FLAGS...]

Starts the server with -np 4, warms it up, then for each stream count sends
that many /completion requests at once (distinct prompts, greedy,
ignore_eos, N_PREDICT tokens each) and prints generated tokens over wall
time. Point any llama.cpp-compatible server binary at it to compare.
"""

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request

PROMPTS = ["Once upon a time", "The little dog", "Tom and Sue went", "One day, a bird"]


def post(base, body):
    req = urllib.request.Request(base + "/completion", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.load(r)


def main():
    server, model = sys.argv[1], sys.argv[2]
    n_predict = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    extra = sys.argv[4:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([server, "-m", model, "--port", str(port), "-np", "4", "-c", "2048"] + extra,
                            stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(3000):
            try:
                with urllib.request.urlopen(base + "/health") as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        post(base, {"prompt": "Hello", "n_predict": 4, "temperature": 0})
        for streams in (1, 2, 4):
            results = [None] * streams

            def one(i):
                results[i] = post(base, {"prompt": PROMPTS[i], "n_predict": n_predict,
                                         "temperature": 0, "ignore_eos": True})

            threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            dt = time.perf_counter() - t0
            n = sum(r["tokens_predicted"] for r in results)
            print(f"streams={streams} generated={n} wall={dt:.2f}s total={n / dt:.2f} tok/s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
