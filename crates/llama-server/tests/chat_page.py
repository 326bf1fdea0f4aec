#!/usr/bin/env python3
"""The built-in chat page in headless Chromium.

Usage: chat_page.py SERVER_BINARY MODEL.gguf

Opens `/?q=...` (the page sends that message on load), then asks the page
through Chromium's DevTools protocol until the streamed reply has ended: the
DOM must hold the user's message, a non-empty assistant reply and the
end-of-stream mark. Needs Debian's `chromium` and PyPI's `websocket-client`.
"""

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket

STATE = (
    "({done: document.body.dataset.done || '', "
    "user: [...document.querySelectorAll('#log .user')].map(d => d.textContent), "
    "reply: [...document.querySelectorAll('#log .assistant')].map(d => d.textContent), "
    "error: [...document.querySelectorAll('#log .error')].map(d => d.textContent)})"
)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, what, seconds=30):
    end = time.time() + seconds
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read()
        except OSError:
            time.sleep(0.1)
    sys.exit(f"{what} did not answer at {url}")


def page_socket(dport, port):
    end = time.time() + 30
    while time.time() < end:
        listing = json.loads(wait_http(f"http://127.0.0.1:{dport}/json", "chromium"))
        for p in listing:
            if p.get("type") == "page" and f":{port}/" in p.get("url", ""):
                return websocket.create_connection(p["webSocketDebuggerUrl"], timeout=10)
        time.sleep(0.1)
    sys.exit("chromium opened no page")


def evaluator(ws):
    seq = [0]

    def evaluate(expr):
        seq[0] += 1
        ws.send(json.dumps({"id": seq[0], "method": "Runtime.evaluate",
                            "params": {"expression": expr, "returnByValue": True}}))
        while True:
            msg = json.loads(ws.recv())
            if msg.get("id") == seq[0]:
                return msg.get("result", {}).get("result", {}).get("value")

    return evaluate


def check(port, dport, profile):
    browser = subprocess.Popen(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         f"--remote-debugging-port={dport}", "--remote-allow-origins=*",
         f"http://127.0.0.1:{port}/?q=Once%20upon%20a%20time"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ws = page_socket(dport, port)
        evaluate = evaluator(ws)
        end = time.time() + 60
        s = evaluate(STATE)
        while (not s or s["done"] != "1") and time.time() < end:
            if s and s["error"]:
                sys.exit(f"the page shows an error: {s['error']}")
            time.sleep(0.2)
            s = evaluate(STATE)
        ws.close()
    finally:
        browser.terminate()
        browser.wait(timeout=30)
    if not s or s["done"] != "1":
        sys.exit(f"the stream did not finish: {s}")
    if s["user"] != ["Once upon a time"]:
        sys.exit(f"the user's message is not shown: {s}")
    if len(s["reply"]) != 1 or not s["reply"][0].strip():
        sys.exit(f"no reply streamed: {s}")
    print(f"chat page: reply streamed: {s['reply'][0]!r}")


def main():
    server, model = sys.argv[1], sys.argv[2]
    port, dport = free_port(), free_port()
    profile = tempfile.mkdtemp()
    srv = subprocess.Popen([server, "-m", model, "--port", str(port), "-c", "512", "--log-disable"],
                           stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", "the server")
        check(port, dport, profile)
    finally:
        srv.terminate()
        srv.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
