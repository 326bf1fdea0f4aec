#!/usr/bin/env python3
"""The official `openai` Python client against llama-server.

Usage: openai_client.py SERVER_BINARY MODEL.gguf

Starts the server on a free loopback port (with --embeddings and an API
key), then checks: models list, chat completion (streamed and not), text
completion, embeddings, structured output (`chat.completions.parse` with a
pydantic model as `response_format`, parsed into the model), and that a bad
request raises the client's BadRequestError. Exits non-zero on the first
failure.
"""

import socket
import subprocess
import sys
import time
import urllib.request

import openai
from typing import Literal

from pydantic import BaseModel, Field


class Pet(BaseModel):
    name: str = Field(max_length=12)
    kind: Literal["cat", "dog"]


class Answer(BaseModel):
    mood: Literal["happy", "sad"]
    age: int = Field(ge=1, le=99)
    pets: list[Pet] = Field(max_length=2)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    server, model = sys.argv[1], sys.argv[2]
    port = free_port()
    key = "test-key"
    proc = subprocess.Popen(
        [server, "-m", model, "--port", str(port), "-c", "1024", "-np", "2",
         "--embeddings", "--pooling", "mean", "--api-key", key, "--log-disable"],
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
                sys.exit("server exited early")
            time.sleep(0.1)
        else:
            sys.exit("server not ready")

        client = openai.OpenAI(base_url=base + "/v1", api_key=key)
        models = client.models.list()
        assert len(models.data) == 1, models
        name = models.data[0].id

        msgs = [{"role": "user", "content": "Once upon a time"}]
        chat = client.chat.completions.create(model=name, messages=msgs, max_tokens=16, temperature=0)
        text = chat.choices[0].message.content
        assert chat.choices[0].message.role == "assistant"
        assert chat.usage.completion_tokens > 0 and chat.usage.prompt_tokens > 0, chat.usage
        assert chat.choices[0].finish_reason in ("stop", "length")

        stream = client.chat.completions.create(
            model=name, messages=msgs, max_tokens=16, temperature=0, stream=True,
            stream_options={"include_usage": True})
        parts, usage = [], None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
            if chunk.usage:
                usage = chunk.usage
        assert "".join(parts) == text, ("".join(parts), text)
        assert usage is not None and usage.completion_tokens == chat.usage.completion_tokens

        comp = client.completions.create(model=name, prompt="Once upon a time", max_tokens=16, temperature=0)
        assert comp.choices[0].text, comp
        assert comp.usage.prompt_tokens == 5, comp.usage
        parts = [c.choices[0].text for c in client.completions.create(
            model=name, prompt="Once upon a time", max_tokens=16, temperature=0, stream=True) if c.choices]
        assert "".join(parts) == comp.choices[0].text

        emb = client.embeddings.create(model=name, input=["Once upon a time", "a dog"])
        assert len(emb.data) == 2 and len(emb.data[0].embedding) > 0
        norm = sum(x * x for x in emb.data[0].embedding) ** 0.5
        assert abs(norm - 1.0) < 1e-3, norm
        emb_f = client.embeddings.create(model=name, input="Once upon a time", encoding_format="float")
        assert max(abs(a - b) for a, b in zip(emb_f.data[0].embedding, emb.data[0].embedding)) < 1e-6

        # Structured output: the reply is parsed into the pydantic model.
        parse = client.beta.chat.completions.parse if hasattr(client, "beta") else client.chat.completions.parse
        parsed = parse(model=name, messages=[{"role": "user", "content": "Tell me about your pets."}],
                       response_format=Answer, max_tokens=400, temperature=0)
        answer = parsed.choices[0].message.parsed
        assert isinstance(answer, Answer), parsed
        assert 1 <= answer.age <= 99 and len(answer.pets) <= 2, answer
        assert parsed.choices[0].finish_reason == "stop", parsed

        try:
            client.chat.completions.create(model=name, messages=[{"role": "wizard", "content": "x"}])
            sys.exit("an unknown role was accepted")
        except openai.BadRequestError as e:
            assert "role" in str(e), e
        try:
            openai.OpenAI(base_url=base + "/v1", api_key="wrong").models.list()
            sys.exit("a wrong key was accepted")
        except openai.AuthenticationError:
            pass
        print("openai client: all checks passed")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
