#!/bin/sh
# The built-in chat page in headless Chromium: the page sends one message
# (?q=...), streams the reply from /v1/chat/completions, and the DOM then
# holds the user's message, a non-empty reply, and the end-of-stream mark.
#
# Usage: chat_page.sh SERVER_BINARY MODEL.gguf  (needs Debian's chromium)
set -eu
server=$1
model=$2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
profile=$(mktemp -d)
"$server" -m "$model" --port "$port" -c 512 --log-disable &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$profile"' EXIT
i=0
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
    i=$((i + 1))
    [ $i -lt 300 ] || { echo "server not ready" >&2; exit 1; }
    sleep 0.1
done
dom=$(chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --user-data-dir="$profile" \
    --timeout=15000 --dump-dom "http://127.0.0.1:$port/?q=Once%20upon%20a%20time" 2>/dev/null)
echo "$dom" | grep -q 'data-done="1"' || { echo "the stream did not finish: $dom" >&2; exit 1; }
echo "$dom" | grep -q '<div class="user">Once upon a time</div>' || { echo "no user message: $dom" >&2; exit 1; }
reply=$(echo "$dom" | sed -n 's/.*<div class="assistant">\([^<]*\)<\/div>.*/\1/p')
[ -n "$reply" ] || { echo "empty reply: $dom" >&2; exit 1; }
echo "chat page: reply streamed: $reply"
