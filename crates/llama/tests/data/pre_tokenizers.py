#!/usr/bin/env python3
"""Writes pre_tokenizers.json: llama.cpp's tokens for a set of texts under
the GPT-2 test vocabulary with each `tokenizer.ggml.pre` name.

usage: pre_tokenizers.py LLAMA_TOKENIZE ggml-vocab-gpt-2.gguf OUT.json

LLAMA_TOKENIZE is llama.cpp's `llama-tokenize` (its shared libraries on
LD_LIBRARY_PATH). Each text is tokenized with special tokens parsed, BOS
where the pre-tokenizer's vocabulary asks for it, and no escape processing.
"""
import json, struct, subprocess, sys, tempfile, os

NAMES = [
    "default", "llama-bpe", "falcon-h1", "deepseek-llm", "deepseek-coder", "deepseek-v3",
    "hunyuan-dense", "falcon", "mpt", "starcoder", "mellum2", "gpt-2", "exaone4", "trillion",
    "refact", "command-r", "stablelm2", "qwen2", "grok-2", "olmo", "dbrx", "smaug-bpe",
    "poro-chat", "chatglm-bpe", "glm4", "viking", "jais", "tekken", "smollm", "codeshell",
    "bloom", "gpt3-finnish", "exaone", "chameleon", "minerva-7b", "jais-2", "spark2_5",
    "youtu", "gpt-4o", "llama4", "granite-embed-multi-97m", "bailingmoe", "seed-coder",
    "ufakzeka", "laguna", "exaone-moe", "minicpm5", "qwen35",
]

TEXTS = [
    "Hello World! I'M here, we'RE ready; it's 1234567 and 12,345,678.9 \u2014 ok?\n\nNext line\r\nCRLF\tTab",
    "na\u00efve caf\u00e9 e\u0301 \u1f48\u03b4\u03c5\u03c3\u03c3\u03b5\u03cd\u03c2 \u043f\u0440\u0438\u0432\u0435\u0442 \u041f\u0420\u0418\u0412\u0415\u0422 mixedCASEWords HTTPServer getHTTPResponse",
    "\u4f60\u597d\u4e16\u754c\uff0c\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002\u3053\u3093\u306b\u3061\u306f \u30ab\u30bf\u30ab\u30ca \u3072\u3089\u304c\u306a \ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8 \u3131\u3134 \u3105\u3106\uff01\u2026\u201c\u5f15\u7528\u201d",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u05e9\u05dc\u05d5\u05dd \u0e44\u0e17\u0e22 \u0e20\u0e32\u0e29\u0e32",
    "def f(x):\n    return x**2  # comment\n\n\n    \n{\"a\": [1, 2, 3]} <br/> &amp; i++ == -> => /* */ // a_b __init__",
    " " * 600 + "x" + "\n" * 5 + "   y  ",
    "\U0001f600\U0001f44d\U0001f3fd\U0001f468\u200d\U0001f469\u200d\U0001f467\U0001f1e9\U0001f1ea \u2211\u221a\u221e \u20ac100 $5 %20 #tag @user \u00b0 \u00a9\u00ae\u2122 \ufb01 \u00df \u00c6",
    "<|endoftext|>special<|endoftext|> 000 0001 99999999999 3.14159 1e-10 0x1F 1_000_000",
]

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def with_pre(src, pre):
    """The bytes of GGUF file `src` (no tensors) with tokenizer.ggml.pre = pre."""
    b = open(src, "rb").read()
    ver, = struct.unpack_from("<I", b, 4)
    nt, nkv = struct.unpack_from("<QQ", b, 8)
    assert nt == 0, "a vocabulary-only file is expected"
    o, kvs = 24, []

    def rstr(o):
        n, = struct.unpack_from("<Q", b, o)
        return b[o + 8:o + 8 + n], o + 8 + n

    for _ in range(nkv):
        start = o
        key, o = rstr(o)
        t, = struct.unpack_from("<I", b, o)
        o += 4
        if t == 8:
            _, o = rstr(o)
        elif t == 9:
            et, n = struct.unpack_from("<IQ", b, o)
            o += 12
            if et == 8:
                for _ in range(n):
                    _, o = rstr(o)
            else:
                o += SIZES[et] * n
        else:
            o += SIZES[t]
        kvs.append((key.decode(), b[start:o]))

    def enc(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x

    new = enc("tokenizer.ggml.pre") + struct.pack("<I", 8) + enc(pre)
    out = [new if k == "tokenizer.ggml.pre" else raw for k, raw in kvs]
    if all(k != "tokenizer.ggml.pre" for k, _ in kvs):
        out.append(new)
    body = b"GGUF" + struct.pack("<IQQ", ver, 0, len(out)) + b"".join(out)
    return body + b"\0" * ((-len(body)) % 32)


def main():
    exe, vocab, out_path = sys.argv[1:4]
    outputs, index, names = [], {}, {}
    with tempfile.TemporaryDirectory() as d:
        for name in NAMES:
            path = os.path.join(d, "vocab.gguf")
            open(path, "wb").write(with_pre(vocab, name))
            ids = []
            for text in TEXTS:
                tp = os.path.join(d, "text.txt")
                open(tp, "w", encoding="utf-8", newline="").write(text)
                r = subprocess.run([exe, "-m", path, "-f", tp, "--ids", "--no-escape", "--log-disable"],
                                   capture_output=True, check=True)
                line = r.stdout.decode().strip().splitlines()[-1]
                toks = json.loads(line)
                key = " ".join(map(str, toks))
                if key not in index:
                    index[key] = len(outputs)
                    outputs.append(key)
                ids.append(index[key])
            names[name] = ids
    json.dump({"texts": TEXTS, "outputs": outputs, "names": names}, open(out_path, "w"), indent=0)


main()
