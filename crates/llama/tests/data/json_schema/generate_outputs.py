"""Writes outputs.json: llama-completion's greedy output under some of the
schemas here, for tests/json_schema_reference.rs to compare llama-cli with.

usage: python3 generate_outputs.py LLAMA_COMPLETION MODELS_DIR
(MODELS_DIR holds stories260K.gguf, the repository's models/ folder)
"""
import json
import subprocess
import sys

exe, models = sys.argv[1], sys.argv[2]
CASES = [
    ("object_required_and_optional", "Once upon a time", 48),
    ("pydantic_model", "Once upon a time", 40),
    ("int_range_neg10_10", "Once upon a time", 16),
    ("pattern_alternation_repetition", "Once upon a time", 16),
    ("ref_recursive_tree", "Once upon a time", 40),
    ("array_min2_max5", "The little dog", 24),
    ("formats_in_object", "Once upon a time", 40),
    ("additional_schema_with_properties", "Once upon a time", 24),
    ("enum_strings", "Lily liked", 8),
    ("any_of", "Once upon a time", 16),
    ("one_of_objects", "The cat", 24),
    ("tuple_prefix_items", "Once upon a time", 24),
    ("int_min_123", "Tom had", 16),
    ("nested_objects", "Once upon a time", 48),
    ("format_uuid", "Once upon a time", 24),
    ("openai_strict_style", "Once upon a time", 48),
]
out = []
for name, prompt, n in CASES:
    args = [exe, "-m", f"{models}/stories260K.gguf", "-p", prompt, "-n", str(n),
            "--temp", "0", "-t", "2", "-no-cnv", "--json-schema-file", f"{name}.json"]
    # llama-completion sometimes exits before its output is flushed: the
    # first complete output of a few runs is kept.
    for _ in range(6):
        r = subprocess.run(args, capture_output=True, timeout=120)
        if r.returncode == 0 and r.stdout.endswith(b"\n\n"):
            break
    else:
        print(f"skipping {name}: no complete output", file=sys.stderr)
        continue
    out.append({"model": "repo:stories260K.gguf", "schema": f"{name}.json", "prompt": prompt,
                "n_predict": n, "stdout": r.stdout.decode("utf-8")})
doc = {
    "generated_by": "llama-completion (llama.cpp 0c1e570, CPU) -m MODEL -p PROMPT -n N_PREDICT "
                    "--temp 0 -t 2 -no-cnv --json-schema-file SCHEMA",
    "cases": out,
}
with open("outputs.json", "w") as f:
    json.dump(doc, f, indent=1, ensure_ascii=False)
    f.write("\n")
print(len(out), "cases")
