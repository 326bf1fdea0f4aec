#!/bin/sh
# Checks and benchmarks of the engine on this machine's Vulkan GPU(s).
#
# Every step is recorded as PASS, FAIL or SKIP (with the reason) in one
# report file, rewritten after each step so that an interrupted run still
# leaves one. A failed step never stops the others; the exit status is 1 when
# any step failed, 2 on a usage error, 0 otherwise.
#
# Needs only a POSIX shell and the usual tools (awk, sed, grep, df, cmp);
# `timeout` (coreutils) bounds each step when present.

set -u

HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$HERE/bin"
TESTS="$HERE/tests"

usage() {
    cat <<'EOF'
usage: ./run.sh [options]

  --skip-7b            leave out the Llama-7B-shaped models (also BUNDLE_SKIP_7B=1)
  --shapes LIST        model shapes to generate and bench, comma separated
                       (default: tinyllama-1.1b,llama-7b)
  --types LIST         file types, comma separated (default: q4_0,q4_k_m,f16)
  --bench-args ARGS    extra llama-bench flags, e.g. "-p 512 -n 128 -r 5"
                       (default: none, i.e. llama-bench's defaults)
  --bandwidth GBS      the GPU's memory bandwidth in GB/s (its data sheet's
                       figure): the report then gives each tg test's share
  --device LIST        Vulkan devices for the offloaded runs, e.g. Vulkan0
                       (default: every Vulkan device listed)
  --report FILE        the report (default: report.md next to this script)
  --work DIR           generated models and logs (default: work/ next to
                       this script); the free-space check looks here
  --keep-models        keep the generated large models (default: each is
                       deleted after its bench, to need the disk of one)
  --timeout SECONDS    limit of each step when `timeout` exists (default 3600)
  -h, --help           this text

Software Vulkan devices (Mesa lavapipe) are used only with
GGML_VK_ALLOW_CPU_DEVICES=1.
EOF
}

SHAPES="tinyllama-1.1b,llama-7b"
TYPES="q4_0,q4_k_m,f16"
BENCH_ARGS=""
BANDWIDTH=""
DEVICES=""
REPORT="$HERE/report.md"
WORK="$HERE/work"
KEEP_MODELS=0
STEP_TIMEOUT=3600
SKIP_7B=${BUNDLE_SKIP_7B:-0}

need_value() {
    if [ "$2" -lt 2 ]; then
        echo "run.sh: $1 needs a value" >&2
        usage >&2
        exit 2
    fi
}

while [ $# -gt 0 ]; do
    case "$1" in
        --skip-7b) SKIP_7B=1 ;;
        --shapes) need_value "$1" $#; SHAPES=$2; shift ;;
        --types) need_value "$1" $#; TYPES=$2; shift ;;
        --bench-args) need_value "$1" $#; BENCH_ARGS=$2; shift ;;
        --bandwidth) need_value "$1" $#; BANDWIDTH=$2; shift ;;
        --device) need_value "$1" $#; DEVICES=$2; shift ;;
        --report) need_value "$1" $#; REPORT=$2; shift ;;
        --work) need_value "$1" $#; WORK=$2; shift ;;
        --keep-models) KEEP_MODELS=1 ;;
        --timeout) need_value "$1" $#; STEP_TIMEOUT=$2; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

for s in $(echo "$SHAPES" | tr ',' ' '); do
    case "$s" in
        tinyllama-1.1b|llama-7b) ;;
        *) echo "run.sh: unknown shape '$s' in --shapes (tinyllama-1.1b, llama-7b)" >&2; exit 2 ;;
    esac
done
for t in $(echo "$TYPES" | tr ',' ' '); do
    case "$t" in
        q4_0|q4_k_m|f16) ;;
        *) echo "run.sh: unknown type '$t' in --types (q4_0, q4_k_m, f16)" >&2; exit 2 ;;
    esac
done
case "$BANDWIDTH" in
    '') ;;
    *[!0-9.]*|.|*.*.*) echo "run.sh: --bandwidth '$BANDWIDTH' is not a number of GB/s" >&2; exit 2 ;;
esac
case "$STEP_TIMEOUT" in
    ''|*[!0-9]*) echo "run.sh: --timeout '$STEP_TIMEOUT' is not a number of seconds" >&2; exit 2 ;;
esac

mkdir -p "$WORK/logs" || { echo "run.sh: cannot create '$WORK'" >&2; exit 2; }
WORK=$(cd "$WORK" && pwd)
LOGS="$WORK/logs"
STEPS="$WORK/steps.txt"      # one line per step: status|seconds|name|note
DETAILS="$WORK/details.md"   # the report's sections after the step table
BENCH_ROWS="$WORK/bench.md"  # llama-bench rows with the derived bandwidth
: >"$STEPS"
: >"$DETAILS"
: >"$BENCH_ROWS"
STARTED=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
STATE="running"

TIMEOUT_BIN=""
if command -v timeout >/dev/null 2>&1; then
    TIMEOUT_BIN=timeout
fi

# --- recording ----------------------------------------------------------

now() { date +%s; }

# record STATUS SECONDS NAME NOTE: one row of the step table.
record() {
    _note=$(printf '%s' "$4" | tr '\n|' ' /')
    printf '%s|%s|%s|%s\n' "$1" "$2" "$3" "$_note" >>"$STEPS"
    printf '[%s] %s: %s\n' "$1" "$3" "$_note" >&2
    write_report
}

# detail TEXT...: appended to the report's details.
detail() { printf '%s\n' "$@" >>"$DETAILS"; }

# detail_log FILE LINES: the last lines of a log, fenced.
detail_log() {
    if [ -s "$1" ]; then
        detail '```' "$(tail -n "$2" "$1")" '```'
    fi
}

# run_logged NAME CMD...: runs CMD with stdout and stderr in
# $LOGS/NAME.out / .err (stdin empty, bounded by the step timeout); its
# exit status.
# (Shell variables are global: the helpers' own names start with an
# underscore so that they never overwrite a caller's.)
run_logged() {
    _log=$1
    shift
    if [ -n "$TIMEOUT_BIN" ]; then
        "$TIMEOUT_BIN" "$STEP_TIMEOUT" "$@" <"/dev/null" >"$LOGS/$_log.out" 2>"$LOGS/$_log.err"
    else
        "$@" <"/dev/null" >"$LOGS/$_log.out" 2>"$LOGS/$_log.err"
    fi
}

# why_failed RC NAME: a short reason for a non-zero exit status.
why_failed() {
    case "$1" in
        124) echo "timed out after ${STEP_TIMEOUT} s" ;;
        *)
            _last=$(grep -v '^[[:space:]]*$' "$LOGS/$2.err" 2>/dev/null | tail -n 1)
            echo "exit status $1${_last:+: $_last}"
            ;;
    esac
}

count() { grep -c "^$1|" "$STEPS" 2>/dev/null || true; }

write_report() {
    n_pass=$(count PASS)
    n_fail=$(count FAIL)
    n_skip=$(count SKIP)
    if [ "$n_fail" -gt 0 ]; then
        _verdict=FAIL
    elif [ "$STATE" != complete ]; then
        _verdict=INCOMPLETE
    else
        _verdict=PASS
    fi
    {
        echo "# GPU bundle report"
        echo
        echo "Summary: $_verdict: $n_pass passed, $n_fail failed, $n_skip skipped ($STATE)"
        echo
        echo "## Machine"
        echo
        echo "- started: $STARTED"
        echo "- host: $(uname -srm 2>/dev/null)"
        echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
        echo "- nproc: $(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"
        echo "- memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null)"
        echo "- GPU: ${GPU_NAMES:-none found}"
        echo "- driver: ${GPU_DRIVERS:-unknown}"
        echo "- Vulkan devices used: ${DEVICES:-none}"
        echo "- GGML_VK_ALLOW_CPU_DEVICES: ${GGML_VK_ALLOW_CPU_DEVICES:-unset}"
        echo "- free disk in the work folder: ${FREE_MIB:-?} MiB"
        if [ -f "$HERE/BUILD_INFO" ]; then
            sed 's/^/- /' "$HERE/BUILD_INFO"
        fi
        echo "- options: shapes $SHAPES; types $TYPES; skip 7B: $SKIP_7B; bench args: ${BENCH_ARGS:-default}; bandwidth: ${BANDWIDTH:-not given}"
        echo
        echo "## Steps"
        echo
        echo "| step | result | seconds | note |"
        echo "| --- | --- | ---: | --- |"
        awk -F'|' '{ printf "| %s | %s | %s | %s |\n", $3, $1, $2, $4 }' "$STEPS"
        if [ -s "$BENCH_ROWS" ]; then
            echo
            echo "## llama-bench (-ngl 99)"
            echo
            echo "Weights GB/s: model size x t/s of a tg test, the rate at which"
            echo "generation reads the weights; its share of the GPU's memory bandwidth"
            echo "(${BANDWIDTH:-not given: --bandwidth} GB/s) in the last column."
            echo
            echo "| model | size | backend | ngl | test | t/s | weights GB/s | of bandwidth |"
            echo "| --- | ---: | --- | --: | --- | ---: | ---: | ---: |"
            cat "$BENCH_ROWS"
        fi
        echo
        cat "$DETAILS"
    } >"$REPORT.tmp" && mv "$REPORT.tmp" "$REPORT"
}

on_signal() {
    STATE="interrupted"
    write_report
    echo "run.sh: interrupted; report: $REPORT" >&2
    exit 130
}
trap on_signal INT TERM

FREE_MIB=$(df -Pk "$WORK" 2>/dev/null | awk 'NR == 2 { printf "%d", $4 / 1024 }')

# --- 1. devices -----------------------------------------------------------

GPU_NAMES=""
GPU_DRIVERS=""
GPU_MIB=0
list_devices() {
    t0=$(now)
    run_logged devices "$BIN/llama-cli" --list-devices
    rc=$?
    detail "## Devices" "" "\`llama-cli --list-devices\` (stdout, then stderr):" ""
    detail '```' "$(cat "$LOGS/devices.out")" "$(cat "$LOGS/devices.err")" '```' ""
    found=$(grep -E '^ +Vulkan[0-9]+: ' "$LOGS/devices.out" | sed 's/^ *//')
    if [ "$rc" -ne 0 ]; then
        DEVICES=""
        record FAIL $(($(now) - t0)) "list devices" "$(why_failed "$rc" devices)"
        return
    fi
    if [ -z "$found" ]; then
        DEVICES=""
        why=$(grep -m1 'no Vulkan device' "$LOGS/devices.err")
        record FAIL $(($(now) - t0)) "list devices" "no Vulkan device${why:+ ($why)}"
        return
    fi
    all=$(echo "$found" | sed 's/:.*//' | paste -sd, -)
    if [ -z "$DEVICES" ]; then
        DEVICES=$all
    fi
    # "Vulkan0: NAME (TOTAL MiB, FREE MiB free)"
    GPU_NAMES=$(echo "$found" | sed 's/ ([0-9]* MiB, [0-9]* MiB free)$//' | paste -sd';' - | sed 's/;/; /g')
    GPU_MIB=0
    for d in $(echo "$DEVICES" | tr ',' ' '); do
        mib=$(echo "$found" | grep "^$d: " | sed -n 's/.*(\([0-9]*\) MiB, [0-9]* MiB free)$/\1/p')
        if [ -z "$mib" ]; then
            record FAIL $(($(now) - t0)) "list devices" "--device names '$d', which is not a listed Vulkan device ($all)"
            DEVICES=""
            return
        fi
        GPU_MIB=$((GPU_MIB + mib))
    done
    GPU_DRIVERS=$(grep '^ggml_vulkan: Vulkan[0-9]* = ' "$LOGS/devices.err" |
        sed -n 's/^ggml_vulkan: \(Vulkan[0-9]*\) = .*| driver: \(.*\)$/\1: \2/p' | paste -sd';' - | sed 's/;/; /g')
    record PASS $(($(now) - t0)) "list devices" "$(echo "$found" | wc -l | tr -d ' ') Vulkan device(s): $GPU_NAMES"
}

# --- 2. greedy output, all layers offloaded vs CPU -------------------------

# printable FILE: the file's bytes with non-printable ones shown as '?'.
printable() { head -c 600 "$1" | tr -c '[:print:]\n' '?'; }

# greedy LABEL MODEL N: compares the greedy text with every layer on the
# Vulkan devices (-ngl 99) with the CPU's (-ngl 0 -dev none: no device, so no
# operation can be offloaded either).
greedy() {
    label=$1
    model=$2
    n=$3
    t0=$(now)
    name="greedy $label"
    if [ -z "$DEVICES" ]; then
        record FAIL 0 "$name" "no Vulkan device to offload to (see list devices)"
        return
    fi
    if [ ! -f "$model" ]; then
        record FAIL 0 "$name" "model '$model' is missing"
        return
    fi
    prompt="Once upon a time"
    set -- -m "$model" -p "$prompt" -n "$n" --temp 0 -s 42 -c 512 -no-cnv
    run_logged "greedy-$label-cpu" "$BIN/llama-cli" "$@" -ngl 0 -dev none
    rc_cpu=$?
    run_logged "greedy-$label-gpu" "$BIN/llama-cli" "$@" -ngl 99 -dev "$DEVICES"
    rc_gpu=$?
    cpu="$LOGS/greedy-$label-cpu.out"
    gpu="$LOGS/greedy-$label-gpu.out"
    detail "## Greedy: $label" "" "\`llama-cli -m $(basename "$model") -p \"Once upon a time\" -n $n --temp 0 -s 42 -c 512 -no-cnv\`, with \`-ngl 0 -dev none\` (CPU) and \`-ngl 99 -dev $DEVICES\` (GPU); non-printable bytes shown as ?." ""
    detail "CPU:" '```' "$(printable "$cpu")" '```' "GPU:" '```' "$(printable "$gpu")" '```' ""
    if [ "$rc_cpu" -ne 0 ]; then
        detail_log "$LOGS/greedy-$label-cpu.err" 20
        record FAIL $(($(now) - t0)) "$name" "CPU run: $(why_failed "$rc_cpu" "greedy-$label-cpu")"
        return
    fi
    if [ "$rc_gpu" -ne 0 ]; then
        detail_log "$LOGS/greedy-$label-gpu.err" 20
        record FAIL $(($(now) - t0)) "$name" "GPU run: $(why_failed "$rc_gpu" "greedy-$label-gpu")"
        return
    fi
    # "load_tensors: offloaded A/B layers to GPU": all of them, or the GPU
    # run would partly be the CPU's.
    offloaded=$(sed -n 's/.*offloaded \([0-9]*\/[0-9]*\) layers to GPU.*/\1/p' "$LOGS/greedy-$label-gpu.err" | tail -n 1)
    if [ -z "$offloaded" ] || [ "${offloaded%/*}" != "${offloaded#*/}" ]; then
        detail_log "$LOGS/greedy-$label-gpu.err" 20
        record FAIL $(($(now) - t0)) "$name" "the GPU run offloaded ${offloaded:-no} layers (want all)"
        return
    fi
    bytes=$(wc -c <"$cpu" | tr -d ' ')
    # The output is the prompt's echo, the generated text and a newline.
    if [ "$bytes" -le $((${#prompt} + 2)) ]; then
        record FAIL $(($(now) - t0)) "$name" "the CPU run generated nothing ($bytes bytes of output)"
    elif cmp -s "$cpu" "$gpu"; then
        record PASS $(($(now) - t0)) "$name" "GPU output ($offloaded layers offloaded) equals the CPU's ($n tokens, $bytes bytes)"
    else
        at=$(cmp "$cpu" "$gpu" 2>/dev/null | sed -n 's/.* differ: \(byte [0-9]*\).*/\1/p')
        if [ -n "$at" ]; then
            at="at $at"
        else
            at="(one is a prefix of the other)"
        fi
        record FAIL $(($(now) - t0)) "$name" "GPU output differs from the CPU's $at"
    fi
}

# --- 3. perplexity, all layers offloaded vs CPU ----------------------------

# Relative PPL difference allowed: the GPU may round activations to F16 where
# the CPU keeps F32 (llama.cpp's own PPL moves by up to ~0.2 % between its
# CPU settings on F32 models).
PPL_TOLERANCE=0.01

perplexity() {
    model="$HERE/models/stories260K.gguf"
    text="$HERE/texts/story.txt"
    t0=$(now)
    name="perplexity stories260K"
    if [ -z "$DEVICES" ]; then
        record FAIL 0 "$name" "no Vulkan device to offload to (see list devices)"
        return
    fi
    set -- -m "$model" -f "$text" -c 64 -b 64
    run_logged ppl-cpu "$BIN/llama-perplexity" "$@" -ngl 0 -dev none
    rc_cpu=$?
    run_logged ppl-gpu "$BIN/llama-perplexity" "$@" -ngl 99 -dev "$DEVICES"
    rc_gpu=$?
    p_cpu=$(sed -n 's/^Final estimate: PPL = \([0-9.eE+-]*\) .*/\1/p' "$LOGS/ppl-cpu.out")
    p_gpu=$(sed -n 's/^Final estimate: PPL = \([0-9.eE+-]*\) .*/\1/p' "$LOGS/ppl-gpu.out")
    detail "## Perplexity: stories260K" "" "\`llama-perplexity -m stories260K.gguf -f texts/story.txt -c 64 -b 64\`: CPU (\`-ngl 0 -dev none\`) ${p_cpu:-none}, GPU (\`-ngl 99\`) ${p_gpu:-none}; allowed relative difference $PPL_TOLERANCE." ""
    if [ "$rc_cpu" -ne 0 ] || [ -z "$p_cpu" ]; then
        detail_log "$LOGS/ppl-cpu.err" 20
        record FAIL $(($(now) - t0)) "$name" "CPU run: $(why_failed "$rc_cpu" ppl-cpu)"
        return
    fi
    if [ "$rc_gpu" -ne 0 ] || [ -z "$p_gpu" ]; then
        detail_log "$LOGS/ppl-gpu.err" 20
        record FAIL $(($(now) - t0)) "$name" "GPU run: $(why_failed "$rc_gpu" ppl-gpu)"
        return
    fi
    verdict=$(awk -v a="$p_cpu" -v b="$p_gpu" -v tol="$PPL_TOLERANCE" 'BEGIN {
        d = (b - a) / a; if (d < 0) d = -d
        printf "%s %.2e", (d <= tol ? "PASS" : "FAIL"), d }')
    record "${verdict%% *}" $(($(now) - t0)) "$name" "PPL CPU $p_cpu, GPU $p_gpu (relative difference ${verdict#* })"
}

# --- 4. conformance suite --------------------------------------------------

conformance() {
    for t in vulkan-conformance vulkan-ops; do
        t0=$(now)
        name="suite $t"
        if [ ! -x "$TESTS/$t" ]; then
            record FAIL 0 "$name" "test executable '$TESTS/$t' is missing"
            continue
        fi
        # --nocapture: the suite's own report (a count per device, then one
        # line per case) goes to stderr even when the test passes.
        REQUIRE_VULKAN=1 run_logged "$t" "$TESTS/$t" --test-threads=1 --nocapture
        rc=$?
        result=$(grep -h '^test result:' "$LOGS/$t.out" "$LOGS/$t.err" | tail -n 1)
        # Each test prints a count per device: their sums.
        cases=$(grep -h '^Vulkan[0-9]*: [0-9]* passed, ' "$LOGS/$t.err" | tr -d ',:' | awk '
            { if (!($1 in p)) order[n++] = $1; p[$1] += $2; f[$1] += $4; s[$1] += $6 }
            END { for (i = 0; i < n; i++) { d = order[i]
                printf "%s%s: %d passed, %d failed, %d skipped", (i ? "; " : ""), d, p[d], f[d], s[d] } }')
        detail "## $t" "" '```' "$(grep -h '^test \|^test result' "$LOGS/$t.out")" '```' ""
        if [ -n "$cases" ]; then
            detail "Cases per device, and every case that did not pass:" "" '```' \
                "$(grep -h '^Vulkan[0-9]*: [0-9]* passed, \|^  [a-zA-Z]' "$LOGS/$t.err" | grep -v '^  ok ' | head -n 80)" '```' ""
        fi
        if [ "$rc" -eq 0 ]; then
            record PASS $(($(now) - t0)) "$name" "${result:-no test result line}${cases:+ (cases: $cases)}"
        else
            detail "Its stderr, last lines:" ""
            detail_log "$LOGS/$t.err" 40
            record FAIL $(($(now) - t0)) "$name" "${result:-$(why_failed "$rc" "$t")}"
        fi
    done
}

# --- 5. generated models and llama-bench -----------------------------------

# model_mib SHAPE TYPE: the file size to expect, rounded up (parameters x
# bits per weight of the mixture, plus 1 %).
model_mib() {
    case "$1" in
        tinyllama-1.1b) params=1100048384 ;;
        llama-7b) params=6738415616 ;;
    esac
    case "$2" in
        f16) bits=16.0 ;;
        q4_0) bits=4.65 ;;
        q4_k_m) bits=4.95 ;;
    esac
    awk -v p="$params" -v b="$bits" 'BEGIN { printf "%d", p * b / 8 / 1048576 * 1.01 + 1 }'
}

# bench_rows FILE: llama-bench's markdown rows, with the weights' GB/s of
# tg tests (size in MiB x t/s) and its share of --bandwidth.
bench_rows() {
    awk -F'|' -v bw="$BANDWIDTH" '/^\| / && $2 !~ /^ *model *$/ && $2 !~ /^ *-+ *$/ {
        for (i = 2; i < NF; i++) { gsub(/^ +| +$/, "", $i) }
        test = $(NF - 2); ts = $(NF - 1); size = $3
        split(ts, a, " ")
        gbs = ""; pct = ""
        if (test ~ /^tg/ && size ~ / MiB$/) {
            s = size; sub(/ MiB$/, "", s)
            rate = s * 1048576 * a[1] / 1e9
            gbs = sprintf("%.2f", rate)
            if (bw > 0) pct = sprintf("%.0f %%", 100 * rate / bw)
        }
        printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $2, size, $5, $7, test, ts, gbs, pct
    }' "$1"
}

models() {
    # The plan first: what the selection needs against what the disk has.
    _plan=""
    _largest=0
    _all=0
    for shape in $(echo "$SHAPES" | tr ',' ' '); do
        for ty in $(echo "$TYPES" | tr ',' ' '); do
            if [ "$shape" = llama-7b ] && [ "$SKIP_7B" = 1 ]; then
                continue
            fi
            mib=$(model_mib "$shape" "$ty")
            _plan="$_plan${_plan:+, }$shape-$ty ~$mib MiB"
            _all=$((_all + mib))
            if [ "$mib" -gt "$_largest" ]; then _largest=$mib; fi
        done
    done
    if [ "$KEEP_MODELS" = 1 ]; then _need=$((_all + 1024)); else _need=$((_largest + 1024)); fi
    detail "## Generated models" "" "Planned: ${_plan:-none}. The work folder has ${FREE_MIB:-?} MiB free; the run needs ~$_need MiB there (each model plus 1024 MiB spare, $(
        if [ "$KEEP_MODELS" = 1 ]; then echo "all kept"; else echo "one at a time: each is deleted after its bench"; fi)). Bench flags: -ngl 99 -dev ${DEVICES:-none} ${BENCH_ARGS:-(llama-bench's defaults)}." ""
    for shape in $(echo "$SHAPES" | tr ',' ' '); do
        for ty in $(echo "$TYPES" | tr ',' ' '); do
            label="$shape-$ty"
            if [ "$shape" = llama-7b ] && [ "$SKIP_7B" = 1 ]; then
                record SKIP 0 "generate $label" "7B models skipped (--skip-7b or BUNDLE_SKIP_7B=1)"
                continue
            fi
            file="$WORK/$label.gguf"
            mib=$(model_mib "$shape" "$ty")
            t0=$(now)
            # Nothing to generate where there is nothing to bench on.
            if [ -z "$DEVICES" ]; then
                record FAIL 0 "bench $label" "no Vulkan device to offload to (see list devices); not generated"
                continue
            fi
            if [ "$mib" -gt "$GPU_MIB" ]; then
                record SKIP 0 "bench $label" "the weights (~$mib MiB) exceed the memory of $DEVICES ($GPU_MIB MiB); not generated"
                continue
            fi
            if [ ! -s "$file" ]; then
                free=$(df -Pk "$WORK" 2>/dev/null | awk 'NR == 2 { printf "%d", $4 / 1024 }')
                if [ -z "$free" ] || [ "$free" -lt $((mib + 1024)) ]; then
                    record SKIP 0 "generate $label" "needs ~$mib MiB plus 1024 MiB spare, $WORK has ${free:-unknown} MiB free"
                    continue
                fi
                # Written under another name first, so that an interrupted
                # run never leaves a partial model to be taken as finished.
                run_logged "gen-$label" "$BIN/xtask" gen-model --preset "$shape" --type "$ty" --quiet --out "$file.part"
                rc=$?
                if [ "$rc" -ne 0 ]; then
                    detail "## generate $label" ""
                    detail_log "$LOGS/gen-$label.err" 20
                    rm -f "$file.part"
                    record FAIL $(($(now) - t0)) "generate $label" "$(why_failed "$rc" "gen-$label")"
                    continue
                fi
                mv "$file.part" "$file"
                record PASS $(($(now) - t0)) "generate $label" "$(tail -n 1 "$LOGS/gen-$label.out" | sed 's/\.gguf\.part: /.gguf: /')"
            else
                record PASS 0 "generate $label" "kept from an earlier run: $file"
            fi
            bench "$label" "$file"
            if [ "$KEEP_MODELS" != 1 ]; then
                rm -f "$file"
            fi
        done
    done
}

# bench LABEL FILE: llama-bench with every layer offloaded.
bench() {
    t0=$(now)
    name="bench $1"
    # shellcheck disable=SC2086 # BENCH_ARGS holds several flags
    run_logged "bench-$1" "$BIN/llama-bench" -m "$2" -ngl 99 -dev "$DEVICES" $BENCH_ARGS
    rc=$?
    bench_rows "$LOGS/bench-$1.out" >"$LOGS/bench-$1.rows"
    if [ "$rc" -ne 0 ] || [ ! -s "$LOGS/bench-$1.rows" ]; then
        detail "## bench $1" ""
        detail_log "$LOGS/bench-$1.err" 20
        record FAIL $(($(now) - t0)) "$name" "$(why_failed "$rc" "bench-$1")"
        return
    fi
    cat "$LOGS/bench-$1.rows" >>"$BENCH_ROWS"
    record PASS $(($(now) - t0)) "$name" "$(awk -F'|' '{ gsub(/ /, "", $6); gsub(/^ +| +$/, "", $7); printf "%s%s %s t/s", (NR > 1 ? "; " : ""), $6, $7 }' "$LOGS/bench-$1.rows")"
}

# --- the run ---------------------------------------------------------------

rm -f "$WORK"/*.part

write_report
list_devices
greedy stories260K "$HERE/models/stories260K.gguf" 64

# A small generated model (random weights, the fixtures' "tiny" shape and
# stories260K's vocabulary): other widths, F16 weights.
t0=$(now)
small="$WORK/small-f16.gguf"
run_logged gen-small "$BIN/xtask" gen-model --n-embd 256 --n-layer 4 --n-head 8 --n-head-kv 4 \
    --n-ff 768 --vocab-from "$HERE/models/stories260K.gguf" --type f16 --seed 21 --quiet --out "$small"
rc=$?
if [ "$rc" -eq 0 ]; then
    record PASS $(($(now) - t0)) "generate small-f16" "$(tail -n 1 "$LOGS/gen-small.out")"
    greedy small-f16 "$small" 32
else
    detail "## generate small-f16" ""
    detail_log "$LOGS/gen-small.err" 20
    record FAIL $(($(now) - t0)) "generate small-f16" "$(why_failed "$rc" gen-small)"
    record FAIL 0 "greedy small-f16" "no model (its generation failed)"
fi

perplexity
conformance
models

STATE="complete"
write_report
echo "report: $REPORT" >&2
grep '^Summary:' "$REPORT" >&2
if [ "$(count FAIL)" -gt 0 ]; then
    exit 1
fi
exit 0
