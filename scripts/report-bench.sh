#!/usr/bin/env bash
# The report's size and open time for a big run: 99 strategies (11 profile pairs x the 9 of
# --matrix all) x 10,000 rounds of `rr` on the model with 1 % loss (stalls, ladders), and explain on a big capture if one is given
# ($1, e.g. a 1M-packet pcap). Targets (issue 12): under 5 MB, open in under 2 s. The open time
# is the page's own (navigation start to the end of its script, #report-ok data-ms, all charts
# drawn) and, as a baseline measured in the same run, the same for the smallest report
# (1 strategy, 10 rounds), so the ratio shows what the size costs on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=${CARGO_TARGET_DIR:-target}/release/tcpstall
cargo build --release -q -p tcpstall
open_ms() { # page -> "script ms" (best of 3) and "wall ms of chromium --dump-dom" (best of 3)
  local best=999999 wall=999999 i s e ms
  for i in 1 2 3; do
    s=$(date +%s%N)
    ms=$(chromium --headless --no-sandbox --disable-gpu --user-data-dir="$tmp/p" --dump-dom "file://$1" 2>/dev/null \
      | grep -o 'id="report-ok"[^>]*data-ms="[0-9]*"' | grep -o 'data-ms="[0-9]*"' | tr -dc 0-9)
    e=$(( ($(date +%s%N) - s) / 1000000 ))
    [ -n "$ms" ] || { echo "no #report-ok in $1: the script failed" >&2; exit 1; }
    [ "$ms" -lt "$best" ] && best=$ms
    [ "$e" -lt "$wall" ] && wall=$e
  done
  echo "$best $wall"
}
verdict() { if [ "$1" -le "$2" ]; then echo meets; else echo misses; fi; }
profiles=linux,linux-2.6,rfc-classic,macos,freebsd,windows,linux:macos,macos:linux,linux:windows,windows:linux,linux:freebsd
"$bin" simulate rr --client none --rounds 10 --report "$tmp/small.html" >/dev/null
s=$(date +%s%N)
"$bin" simulate rr --profile "$profiles" --matrix all --rounds 10000 --link loss=1% --format json -o "$tmp/big.json" --report "$tmp/big.html"
gen=$(( ($(date +%s%N) - s) / 1000000 ))
rows=$(grep -c '"strategy"' "$tmp/big.json")
size=$(stat -c %s "$tmp/big.html")
read -r small_ms small_wall < <(open_ms "$tmp/small.html")
read -r big_ms big_wall < <(open_ms "$tmp/big.html")
echo "simulate: $rows rows x 10000 rounds: simulate + report ${gen} ms"
echo "size: $size bytes ($(( size / 1024 )) KiB); target < 5 MB: $(verdict "$size" 5000000)"
echo "open (page script done): ${big_ms} ms, baseline small report ${small_ms} ms, ratio $(awk "BEGIN{printf \"%.1f\", $big_ms/($small_ms>0?$small_ms:1)}"); target < 2000 ms: $(verdict "$big_ms" 2000)"
echo "chromium --dump-dom wall time (browser start included): ${big_wall} ms, baseline ${small_wall} ms"
if [ -n "${1:-}" ]; then
  s=$(date +%s%N)
  "$bin" explain "$1" --report "$tmp/cap.html" >/dev/null || true
  gen=$(( ($(date +%s%N) - s) / 1000000 ))
  size=$(stat -c %s "$tmp/cap.html")
  read -r ms wall < <(open_ms "$tmp/cap.html")
  echo "explain $1: ${gen} ms; size $size bytes: $(verdict "$size" 5000000); open ${ms} ms: $(verdict "$ms" 2000) (wall ${wall} ms)"
fi
