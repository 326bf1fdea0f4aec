#!/usr/bin/env python3
"""Writes reference.json: llama.cpp's greedy output under each grammar.

usage: generate.py LLAMA_COMPLETION FIXTURES_DIR

Runs, for every case below,
  llama-completion -m MODEL -p PROMPT -n N --temp 0 -t 2 -no-cnv --grammar-file GRAMMAR
(llama.cpp build 0c1e570, CPU) and keeps what it prints on stdout: the
prompt, the generated text, " [end of text]\\n" when an end-of-generation
token stopped it, then "\\n\\n". The model "repo:" is the repository's
models/ folder, "fixtures:" the fixtures' models/ folder; the grammar
"fixtures:" is the fixtures' grammars/ folder, "data:" this folder.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "../../../../.."))

STORIES = "repo:stories260K.gguf"
QWEN3 = "fixtures:tiny-qwen3-f32.gguf"

CASES = [
    (STORIES, "fixtures:json.gbnf", "Once upon a time", 64),
    (STORIES, "fixtures:json_arr.gbnf", "The little dog", 48),
    (STORIES, "fixtures:arithmetic.gbnf", "Once upon a time", 48),
    (STORIES, "fixtures:list.gbnf", "Once upon a time", 64),
    (STORIES, "fixtures:english.gbnf", "The little dog", 48),
    (STORIES, "fixtures:chess.gbnf", "Once upon a time", 48),
    (STORIES, "data:repeat.gbnf", "Once upon a time", 48),
    (STORIES, "data:tokens_stories.gbnf", "Lily", 48),
    (STORIES, "data:unicode.gbnf", "Once upon a time", 24),
    (QWEN3, "fixtures:json.gbnf", "Hello", 48),
    (QWEN3, "fixtures:arithmetic.gbnf", "Hello", 32),
    (QWEN3, "fixtures:list.gbnf", "Write a list:", 40),
    (QWEN3, "fixtures:japanese.gbnf", "Hello", 24),
    (QWEN3, "data:tokens_qwen.gbnf", "Hello", 24),
    (QWEN3, "data:repeat.gbnf", "Hello", 40),
    (QWEN3, "data:unicode.gbnf", "Hello", 24),
    (STORIES, "fixtures:c.gbnf", "Once upon a time", 48),
    ("fixtures:tiny-gemma3-f32.gguf", "fixtures:json.gbnf", "Hello", 40),
    ("fixtures:tiny-gemma3-f32.gguf", "data:unicode.gbnf", "Hello", 24),
    ("fixtures:tiny-phi3-f32.gguf", "fixtures:arithmetic.gbnf", "Hello", 32),
    ("fixtures:tiny-f32.gguf", "fixtures:list.gbnf", "Once upon a time", 40),
    ("fixtures:tiny-f32.gguf", "data:repeat.gbnf", "Once upon a time", 40),
]


def resolve(name, fixtures, sub):
    kind, file = name.split(":", 1)
    if kind == "repo":
        return os.path.join(REPO, "models", file)
    if kind == "fixtures":
        return os.path.join(fixtures, sub, file)
    return os.path.join(HERE, file)


def main():
    exe, fixtures = sys.argv[1], sys.argv[2]
    out = []
    for model, grammar, prompt, n in CASES:
        cmd = [exe, "-m", resolve(model, fixtures, "models"), "-p", prompt,
               "-n", str(n), "--temp", "0", "-t", "2", "-no-cnv",
               "--grammar-file", resolve(grammar, fixtures, "grammars")]
        # llama-completion's logger writes from its own thread and now and
        # then loses the end of the output at exit: run again until the
        # final "\n\n" is there.
        for _ in range(8):
            r = subprocess.run(cmd, capture_output=True, timeout=300)
            assert r.returncode == 0, (cmd, r.stderr[-2000:])
            if r.stdout.endswith(b"\n\n"):
                break
        else:
            raise SystemExit(f"incomplete output for {cmd}")
        out.append({"model": model, "grammar": grammar, "prompt": prompt,
                    "n_predict": n, "stdout": r.stdout.decode("utf-8")})
        print(model, grammar, repr(r.stdout.decode("utf-8")[-60:]))
    doc = {
        "generated_by": "llama-completion (llama.cpp 0c1e570, CPU) -m MODEL -p PROMPT"
                        " -n N_PREDICT --temp 0 -t 2 -no-cnv --grammar-file GRAMMAR",
        "cases": out,
    }
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
