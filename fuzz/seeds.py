#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz targets (fuzz/corpus/<target>/),
small inputs taken from the fixtures and the tests: tiny GGUF files in our own
encoding, a stories260K-shaped LoRA pair and control vector, imatrix files,
chat templates with conversations, grammars with texts, JSON schemas, model
replies with tool calls, server request bodies and RPC frame streams.

Usage: python3 fuzz/seeds.py   (fixtures from $LLAMA_FIXTURES or ../shared/fixtures)
"""

import json
import os
import random
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.environ.get("LLAMA_FIXTURES") or os.path.join(ROOT, "..", "shared", "fixtures")
OUT = os.path.join(ROOT, "fuzz", "corpus")

# GGUF value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?",
          U64: "Q", I64: "q", F64: "d"}


class Gguf:
    """A GGUF file as (metadata, tensors): enough to read the fixtures and to
    write small files."""

    def __init__(self):
        self.kv = []  # (key, type, value); arrays as (ARR, (elem_type, [values]))
        self.tensors = []  # (name, dims, ggml_type, bytes)

    @staticmethod
    def read(path):
        b = open(path, "rb").read()
        at = [0]

        def take(fmt):
            v = struct.unpack_from("<" + fmt, b, at[0])
            at[0] += struct.calcsize("<" + fmt)
            return v[0]

        def string():
            n = take("Q")
            s = b[at[0]:at[0] + n]
            at[0] += n
            return s

        def value(t):
            if t == STR:
                return string()
            if t == ARR:
                et = take("I")
                n = take("Q")
                return (et, [value(et) for _ in range(n)])
            return take(SCALAR[t])

        assert b[:4] == b"GGUF"
        at[0] = 4
        assert take("I") == 3
        n_t, n_kv = take("Q"), take("Q")
        g = Gguf()
        align = 32
        for _ in range(n_kv):
            k = string().decode()
            t = take("I")
            v = value(t)
            if k == "general.alignment":
                align = v
            g.kv.append((k, t, v))
        infos = []
        for _ in range(n_t):
            name = string().decode()
            nd = take("I")
            dims = [take("Q") for _ in range(nd)]
            ty = take("I")
            off = take("Q")
            infos.append((name, dims, ty, off))
        data = (at[0] + align - 1) // align * align
        ends = sorted(o for *_, o in infos) + [len(b) - data]
        for name, dims, ty, off in infos:
            end = min(e for e in ends if e > off) if any(e > off for e in ends) else len(b) - data
            g.tensors.append((name, dims, ty, b[data + off:data + end]))
        return g

    def get(self, key):
        for k, _, v in self.kv:
            if k == key:
                return v
        return None

    def write(self, big=False, version=3):
        e = ">" if big else "<"
        out = bytearray(b"GGUF")
        cnt = "I" if version == 1 else "Q"

        def put(fmt, v):
            out.extend(struct.pack(e + fmt, v))

        def string(s):
            if isinstance(s, str):
                s = s.encode()
            put(cnt, len(s))
            out.extend(s)

        def value(t, v):
            if t == STR:
                string(v)
            elif t == ARR:
                et, items = v
                put("I", et)
                put(cnt, len(items))
                for x in items:
                    value(et, x)
            else:
                put(SCALAR[t], v)

        put("I", version)
        put(cnt, len(self.tensors))
        put(cnt, len(self.kv))
        for k, t, v in self.kv:
            string(k)
            put("I", t)
            value(t, v)
        off = 0
        offsets = []
        for name, dims, ty, data in self.tensors:
            string(name)
            put("I", len(dims))
            for d in dims:
                put(cnt, d)
            put("I", ty)
            put("Q", off)
            offsets.append(off)
            off = (off + len(data) + 31) // 32 * 32
        out.extend(b"\0" * ((-len(out)) % 32))
        base = len(out)
        for (name, dims, ty, data), o in zip(self.tensors, offsets):
            out.extend(b"\0" * (base + o - len(out)))
            out.extend(data)
        return bytes(out)


def f32s(values):
    return struct.pack("<%df" % len(values), *values)


def tiny_llama(rng, n_embd=8, n_ff=16, n_head=2, n_vocab=8, f16=False):
    """A one-layer llama with an 8-token SPM vocabulary."""
    g = Gguf()
    tokens = [b"<unk>", b"<s>", b"</s>", "\u2581".encode(), b"a", b"b", "\u2581a".encode(), b"<0x0A>"]
    g.kv = [
        ("general.architecture", STR, b"llama"),
        ("general.name", STR, b"tiny"),
        ("llama.context_length", U32, 32),
        ("llama.embedding_length", U32, n_embd),
        ("llama.block_count", U32, 1),
        ("llama.feed_forward_length", U32, n_ff),
        ("llama.attention.head_count", U32, n_head),
        ("llama.attention.head_count_kv", U32, n_head),
        ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        ("llama.rope.dimension_count", U32, n_embd // n_head),
        ("tokenizer.ggml.model", STR, b"llama"),
        ("tokenizer.ggml.tokens", ARR, (STR, tokens[:n_vocab])),
        ("tokenizer.ggml.scores", ARR, (F32, [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -1.5, 0.0][:n_vocab])),
        ("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3, 1, 1, 1, 1, 6][:n_vocab])),
        ("tokenizer.ggml.bos_token_id", U32, 1),
        ("tokenizer.ggml.eos_token_id", U32, 2),
    ]

    def w(name, *dims):
        n = 1
        for d in dims:
            n *= d
        vals = [rng.uniform(-0.5, 0.5) for _ in range(n)]
        if f16 and len(dims) == 2:
            g.tensors.append((name, list(dims), 1, struct.pack("<%de" % n, *vals)))
        else:
            g.tensors.append((name, list(dims), 0, f32s(vals)))

    w("token_embd.weight", n_embd, n_vocab)
    w("output_norm.weight", n_embd)
    w("output.weight", n_embd, n_vocab)
    w("blk.0.attn_norm.weight", n_embd)
    w("blk.0.attn_q.weight", n_embd, n_embd)
    w("blk.0.attn_k.weight", n_embd, n_embd)
    w("blk.0.attn_v.weight", n_embd, n_embd)
    w("blk.0.attn_output.weight", n_embd, n_embd)
    w("blk.0.ffn_norm.weight", n_embd)
    w("blk.0.ffn_gate.weight", n_embd, n_ff)
    w("blk.0.ffn_up.weight", n_embd, n_ff)
    w("blk.0.ffn_down.weight", n_ff, n_embd)
    return g


def save(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frame(cmd, body=b""):
    return bytes([cmd]) + struct.pack("<Q", len(body)) + body


def rpc_tensor(tid, n, off, op=0, src=(), ty=0, flags=0):
    """An F32 tensor of n values at byte `off` of the session's first buffer
    (handle 1, base 1 MiB), as our server numbers them."""
    b = struct.pack("<QIQ", tid, ty, 1)
    b += struct.pack("<4I", n, 1, 1, 1)
    b += struct.pack("<4I", 4, 4 * n, 4 * n, 4 * n)
    b += struct.pack("<I", op)
    b += struct.pack("<16i", *([0] * 16))
    b += struct.pack("<i", flags)
    s = list(src) + [0] * (10 - len(src))
    b += struct.pack("<10Q", *s)
    b += struct.pack("<QQQ", 0, 0, (1 << 20) + off)
    b += ("t%d" % tid).encode().ljust(64, b"\0")
    b += struct.pack("<i", 0)
    assert len(b) == 296
    return b


def rpc_seeds():
    hello = frame(14, b"\0" * 24)
    alloc = frame(0, struct.pack("<IQ", 0, 4096))
    dev0 = struct.pack("<I", 0)
    a, b, c = rpc_tensor(1, 16, 0), rpc_tensor(2, 16, 64), rpc_tensor(3, 16, 128, op=2, src=(1, 2), flags=16)
    set_a = frame(6, a + b"\0" + struct.pack("<Q", 0) + f32s([float(i) for i in range(16)]))
    set_b = frame(6, b + b"\0" + struct.pack("<Q", 0) + f32s([100.0 + i for i in range(16)]))
    graph = struct.pack("<II", 0, 1) + struct.pack("<Q", 3) + struct.pack("<I", 3) + a + b + c
    get_c = frame(8, c + struct.pack("<QQ", 0, 64))
    start = hello + frame(15) + alloc
    save("rpc_frames", "add-graph", start + set_a + set_b + frame(10, graph) + get_c + frame(16, dev0) + get_c)
    save("rpc_frames", "queries", start + frame(1, dev0) + frame(2, dev0) + frame(11, dev0) + frame(3, struct.pack("<Q", 1)))
    memset = frame(17, a + struct.pack("<QQ", 0, 32) + b"\x07")
    copy = frame(9, a + b)
    init = frame(12, a)
    alloc_size = frame(13, dev0 + a + b"\0" * (10 * 296))
    clear = frame(5, struct.pack("<QB", 1, 0))
    free = frame(4, struct.pack("<Q", 1))
    hashed = frame(7, a + struct.pack("<QQ", 0, 0x1234))
    save("rpc_frames", "buffers", start + memset + copy + init + alloc_size + hashed + clear + free)
    # A matrix product: c[4] = a[8x4]^T b[8].
    ma = rpc_tensor(1, 8, 0)
    ma = ma[:20] + struct.pack("<4I", 8, 4, 1, 1) + struct.pack("<4I", 4, 32, 128, 128) + ma[52:]
    mb = rpc_tensor(2, 8, 256)
    mc = rpc_tensor(3, 4, 512, op=29, src=(1, 2), flags=16)
    g = struct.pack("<II", 0, 1) + struct.pack("<Q", 3) + struct.pack("<I", 3) + ma + mb + mc
    save("rpc_frames", "mul-mat", start + frame(10, g) + frame(8, mc + struct.pack("<QQ", 0, 16)))


def main():
    if not os.path.isdir(os.path.join(FIXTURES, "models")):
        sys.exit("no fixtures at %s (set LLAMA_FIXTURES)" % FIXTURES)
    rng = random.Random(45)
    fx = lambda *p: os.path.join(FIXTURES, *p)

    # GGUF files.
    tiny = tiny_llama(rng)
    save("model_load", "tiny-llama-f32.gguf", tiny.write())
    save("model_load", "tiny-llama-f16.gguf", tiny_llama(rng, f16=True).write())
    save("gguf_bytes", "tiny-llama.gguf", tiny.write())
    save("gguf_bytes", "tiny-llama-be.gguf", tiny.write(big=True))
    small = Gguf()
    small.kv = [("general.architecture", STR, b"llama"), ("general.alignment", U32, 32),
                ("nested", ARR, (ARR, [(U8, [1, 2]), (U8, [3])]))]
    small.tensors = [("output_norm.weight", [4], 0, f32s([1, 2, 3, 4]))]
    save("gguf_bytes", "small-v3.gguf", small.write())
    save("gguf_bytes", "small-v1.gguf", small.write(version=1))
    stories = Gguf.read(fx("models", "stories260K.gguf"))
    meta = Gguf()
    meta.kv = [kv for kv in stories.kv if not kv[0].startswith("tokenizer.ggml.")]
    meta.tensors = [t for t in stories.tensors if len(t[3]) <= 1024]
    save("gguf_bytes", "stories260K-small-tensors.gguf", meta.write())
    for i in range(3):
        save("gguf_structured", "random-%d" % i, bytes(rng.randrange(256) for _ in range(64 << i)))

    # Adapters for stories260K: the fixture LoRA's first pair, and a
    # control vector for its layers.
    lora = Gguf.read(fx("adapters", "tiny-lora-stories260K.gguf"))
    first = lora.tensors[0][0].rsplit(".lora_", 1)[0]
    lora.tensors = [t for t in lora.tensors if t[0].rsplit(".lora_", 1)[0] == first]
    save("adapters", "lora-one-pair", b"\0" + lora.write())
    n_embd = stories.get("llama.embedding_length")
    cvec = Gguf()
    cvec.kv = [("general.architecture", STR, b"controlvector"),
               ("controlvector.model_hint", STR, b"llama"),
               ("controlvector.layer_count", U32, 4)]
    cvec.tensors = [("direction.%d" % il, [n_embd], 0, f32s([rng.uniform(-1, 1) for _ in range(n_embd)]))
                    for il in range(1, 5)]
    save("adapters", "control-vector", b"\x21" + cvec.write())

    # Importance matrices: GGUF (sums and counts) and the old binary format.
    im = Gguf()
    im.kv = [("general.type", STR, b"imatrix"), ("imatrix.datasets", ARR, (STR, [b"story.txt"])),
             ("imatrix.chunk_count", U32, 4), ("imatrix.chunk_size", U32, 64)]
    im.tensors = [("blk.0.attn_q.weight.in_sum2", [8, 1], 0, f32s([float(i) for i in range(8)])),
                  ("blk.0.attn_q.weight.counts", [1, 1], 0, f32s([4.0])),
                  ("blk.0.ffn_down_exps.weight.in_sum2", [4, 2], 0, f32s([1.0] * 8)),
                  ("blk.0.ffn_down_exps.weight.counts", [1, 2], 0, f32s([2.0, 0.0]))]
    save("imatrix", "imatrix.gguf", im.write())
    legacy = struct.pack("<i", 2)
    for name, vals in [(b"blk.0.attn_q.weight", [1.0] * 8), (b"blk.0.ffn_up.weight", [2.0] * 4)]:
        legacy += struct.pack("<i", len(name)) + name + struct.pack("<ii", 3, len(vals)) + f32s(vals)
    legacy += struct.pack("<i", 10) + struct.pack("<i", 9) + b"story.txt"
    save("imatrix", "imatrix.dat", legacy)

    # Saved states: the real state unchanged, cut, and raw bytes (the
    # target's own encoding: 4 bytes of variant, then the fields).
    save("seq_state", "real-state", b"\0\0\0\0" + b"\0" * 8)
    save("seq_state", "raw", b"\xff\xff\xff\xff" + b"LRSQ" + bytes(60))

    # Tokenizers: the fixtures' test texts, through each vocabulary.
    texts = open(fx("vocab", "ggml-vocab-llama-spm.gguf.inp"), "rb").read().split(b"\n__ggml_vocab_test__\n")
    texts = [t for t in texts if t.strip()][:12]
    for i, t in enumerate(texts):
        save("tokenize_vocab_files", "text-%02d" % i, bytes([(i * 37) & 0xff]) + t)
    save("tokenize_vocab_files", "special", bytes([0x80]) + b"<s>Hello</s> <|endoftext|>[CLS] world\n\t  x")
    for i in range(3):
        save("tokenize_fuzzed_vocab", "random-%d" % i, bytes(rng.randrange(256) for _ in range(128 << i)))

    # Chat templates with a conversation, tools and calls.
    conv = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
         "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_1"}]},
        {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call_1", "name": "get_weather"},
        {"role": "assistant", "content": "21 degrees."},
        {"role": "user", "content": "Thanks"},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}}]
    kwargs = {"enable_thinking": False}
    for f in sorted(os.listdir(fx("templates"))):
        if f.endswith(".jinja") and os.path.getsize(fx("templates", f)) <= 8192:
            src = open(fx("templates", f), "rb").read()
            save("chat_template", f[:-6], src + b"\0" + json.dumps(conv).encode() + b"\0"
                 + json.dumps(tools).encode() + b"\0" + json.dumps(kwargs).encode())

    # Grammars with a text to match.
    samples = {"arithmetic": "(1+2)*3-4/5", "json": "{\"a\": [1, 2.5, \"x\"], \"b\": null}",
               "json_arr": "[{\"a\": 1}]", "list": "- one\n- two\n", "chess": "1. e4 e5 2. Nf3 ",
               "english": "Hello there.", "japanese": "こんにちは", "c": "int main() { return 0; }"}
    for f in sorted(os.listdir(fx("grammars"))):
        if f.endswith(".gbnf"):
            name = f[:-5]
            save("gbnf", name, open(fx("grammars", f), "rb").read() + b"\0" + samples.get(name, "x").encode())
    save("gbnf", "tokens-and-repeats", "root ::= <[65]> [a-z]{2,5} (\"x\" | \"y\")* [^\\n]+ \"\\u00e9\"?\0Aabcxyxz\u00e9")

    # JSON schemas.
    schemas = [
        {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 8},
                                          "age": {"type": "integer", "minimum": 0, "maximum": 150}},
         "required": ["name"], "additionalProperties": False},
        {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3},
        {"oneOf": [{"type": "string", "pattern": "^[a-z]+[0-9]{2,4}$"}, {"type": "null"}]},
        {"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
         "$ref": "#/$defs/node"},
        {"enum": ["a", 1, None, True]},
        {"type": "string", "format": "date-time"},
        {"type": "object", "additionalProperties": {"type": "integer", "exclusiveMinimum": -5}},
        {"allOf": [{"type": "object", "properties": {"a": {"const": 1}}}, {"required": ["a"]}]},
    ]
    for i, s in enumerate(schemas):
        save("json_schema", "schema-%d" % i, json.dumps(s))

    # Model replies with tool calls, one per format (the first byte picks it).
    replies = [
        (0, "Just text <think>not here</think>"),
        (1, "{\"tool_call\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}"),
        (2, "<think>hmm</think>Sure.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>"),
        (3, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"),
        (4, "<|python_tag|>search.call(query=\"x\")"),
        (5, "{\"name\": \"f\", \"parameters\": {\"a\": \"b\"}}"),
        (6, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}, \"id\": \"abcdefghi\"}]"),
        (7, "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"x\": true}}]"),
        (8, "<think>r</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
        (9, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
        (10, "<function=f>{\"a\": 1}</function>"),
        (11, ">>>all\nhello>>>f\n{\"a\": 1}"),
        (12, "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}<|call|>"),
        (13, "Let me call.<|tool_call_start|>[f(a=1, b='x'), g()]<|tool_call_end|>"),
    ]
    for sel, text in replies:
        for flags in (0x00, 0x90):
            save("tool_calls", "format-%02d-%02x" % (sel, flags), bytes([sel | flags]) + text.encode())
    for i, s in enumerate(["[f(a=1, b='x'), g()]", "[Calendar.create_event(title=\"x\", when={'d': (1, 2.5)}, ok=True, n=None)]",
                           "[f(s='it\\'s \\n', l=[1, -2, 3e5], d={\"k\": false})]", "[f(a=1"]):
        save("pythonic_calls", "calls-%d" % i, s)

    # Server request bodies (the first byte picks the endpoint).
    bodies = [
        (0, {"prompt": "Once upon a time", "n_predict": 4, "temperature": 0.5, "top_k": 40, "stop": ["\n"],
             "logit_bias": [["a", False], [5, 1.5]], "n_probs": 2, "grammar": "root ::= [a-z]+",
             "cache_prompt": True, "n_keep": 2, "lora": [{"id": 0, "scale": 0.5}]}),
        (1, {"prompt": [1, 2, 3], "max_tokens": 2, "n": 2, "seed": 3, "logprobs": 2, "stream": True,
             "stream_options": {"include_usage": True}, "logit_bias": {"5": -1}}),
        (2, {"messages": conv[:2], "tools": tools, "tool_choice": "required", "max_tokens": 8,
             "response_format": {"type": "json_schema", "json_schema": {"schema": schemas[0]}},
             "chat_template_kwargs": {"enable_thinking": True}, "parallel_tool_calls": True}),
        (2, {"messages": conv, "tools": tools, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
             "logprobs": True, "top_logprobs": 2}),
        (3, {"input_prefix": "def f(", "input_suffix": "):\n", "prompt": "x",
             "input_extra": [{"filename": "a.py", "text": "import os\n"}]}),
        (4, {"content": "Hello <s> world", "add_special": True, "with_pieces": True}),
        (5, {"tokens": [1, 2, 300, 511]}),
        (6, {"messages": conv}),
        (7, [{"id": 0, "scale": 0.25}]),
    ]
    for i, (sel, body) in enumerate(bodies):
        save("server_requests", "body-%d" % i, bytes([sel]) + json.dumps(body).encode())

    rpc_seeds()


if __name__ == "__main__":
    main()
