#!/usr/bin/env python3
"""A whole tool round trip with the official `openai` Python client.

Usage: openai_tools.py SERVER_BINARY MODEL.gguf

Starts the server under Qwen 3's chat template (from the fixtures'
`templates/` folder next to the model's `models/` folder), then: a request
with `tools` and `tool_choice="required"` returns `tool_calls` of a listed
function with JSON arguments under its schema (and `finish_reason`
"tool_calls"); the same request streamed gives the same call from its
deltas; the call and a `tool` message with its result go back for the final
answer; a named function is called by name. Exits non-zero on the first
failure.
"""

import json
import os
import socket
import subprocess
import sys
import urllib.request
import time

import openai

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 6},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time.",
        "parameters": {"type": "object", "properties": {
            "zone": {"type": "string", "enum": ["utc", "cet"]}},
            "required": ["zone"]}}},
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_call(name, arguments):
    args = json.loads(arguments)
    if name == "get_weather":
        assert len(args["city"]) <= 6 and 1 <= args["days"] <= 7, args
    elif name == "get_time":
        assert args["zone"] in ("utc", "cet"), args
    else:
        raise AssertionError(f"unlisted function {name}")


def main():
    server, model = sys.argv[1], sys.argv[2]
    template = os.path.join(os.path.dirname(os.path.dirname(model)), "templates",
                            "Qwen-Qwen3-0.6B.jinja")
    port = free_port()
    proc = subprocess.Popen(
        [server, "-m", model, "--port", str(port), "-c", "4096",
         "--chat-template-file", template, "--log-disable"],
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                with urllib.request.urlopen(base + "/health") as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if proc.poll() is not None:
                raise SystemExit("server exited")
            time.sleep(0.1)
        client = openai.OpenAI(base_url=base + "/v1", api_key="none")
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        common = dict(model="m", tools=TOOLS, temperature=0, seed=3, max_tokens=400)

        r = client.chat.completions.create(messages=messages, tool_choice="required", **common)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        calls = choice.message.tool_calls
        assert calls and len(calls) == 1, choice.message
        call = calls[0]
        assert call.type == "function" and call.id, call
        check_call(call.function.name, call.function.arguments)

        # Streamed: the same call, put together from the deltas.
        name, args, ids, finish = "", "", set(), None
        for chunk in client.chat.completions.create(
                messages=messages, tool_choice="required", stream=True, **common):
            if not chunk.choices:
                continue
            c = chunk.choices[0]
            finish = c.finish_reason or finish
            for d in c.delta.tool_calls or []:
                assert d.index == 0, d
                if d.id:
                    ids.add(d.id)
                if d.function and d.function.name:
                    name += d.function.name
                if d.function and d.function.arguments:
                    args += d.function.arguments
        assert finish == "tool_calls", finish
        assert len(ids) == 1, ids
        assert (name, args) == (call.function.name, call.function.arguments), (name, args)

        # The result goes back; the reply is an answer in text.
        messages.append(choice.message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"})
        final = client.chat.completions.create(messages=messages, tool_choice="none",
                                               **dict(common, max_tokens=12))
        fc = final.choices[0]
        assert fc.finish_reason in ("stop", "length"), fc
        assert isinstance(fc.message.content, str) and not fc.message.tool_calls, fc.message

        # A named function.
        named = client.chat.completions.create(
            messages=messages[:1],
            tool_choice={"type": "function", "function": {"name": "get_time"}}, **common)
        nc = named.choices[0].message.tool_calls[0]
        assert nc.function.name == "get_time", nc
        check_call(nc.function.name, nc.function.arguments)

        # A function that is not listed is the client's BadRequestError.
        try:
            client.chat.completions.create(
                messages=messages[:1],
                tool_choice={"type": "function", "function": {"name": "nope"}}, **common)
            raise AssertionError("an unlisted function was accepted")
        except openai.BadRequestError:
            pass
        print("openai tools: all checks passed")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
