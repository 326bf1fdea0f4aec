import struct, sys
# A world-style (RWKV) vocabulary: token 0 "<s>" (control), the 256 bytes,
# then multi-byte tokens; texts written as Python's bytes repr without b'' .
words = [b" the", b" a", b"th", b"he", b"the", b"The", b" and", b"an", b"and", b"\n\n", b"ing", b" is", b"is",
         b" world", b"wor", b"ld", b"Hello", b"Hell", b"lo", b", ", b". ", b"\t\t", b"\\\\", b"'s", b"  ", b"    ",
         "é".encode(), "中".encode(), "中文".encode(), "文".encode(), "😀".encode(), b"\xe4\xb8", b"\r\n", b"12", b"123", b"2024",
         b"<s", b"s>", b"<|", b"|>", b"def", b" def", b"():", b"return", b" return", b"\x00\x01", b"\xff\xfe", b"abc", b"abcd", b"bcd", b"cde"]
toks=[b"<s>"]; types=[3]
for b in range(256):
    toks.append(repr(bytes([b]))[2:-1].encode()); types.append(1)
for w in words:
    toks.append(repr(w)[2:-1].encode()); types.append(1)
def s(x): return struct.pack("<Q", len(x)) + x
kv=[]
def add(k, t, v): kv.append(s(k.encode()) + struct.pack("<I", t) + v)
add("general.architecture", 8, s(b"rwkv7"))
add("tokenizer.ggml.model", 8, s(b"rwkv"))
add("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, len(toks)) + b"".join(s(t) for t in toks))
add("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(types)) + b"".join(struct.pack("<i", t) for t in types))
for k in ["bos","eos","unknown"]:
    add(f"tokenizer.ggml.{k}_token_id", 4, struct.pack("<I", 0))
add("tokenizer.ggml.eot_token_id", 4, struct.pack("<I", 257 + words.index(b"\n\n")))
out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(kv)
open(sys.argv[1], "wb").write(out)
print(len(toks), "tokens")
