#!/usr/bin/env bash
# Regenerates docs/report-screenshot.png: a real report (simulate, deterministic: seed 001
# multi-write, every strategy, 1 ms RTT with jitter and 0.5 % loss) rendered by headless Chromium, the same path
# the report tests use (tests/cli/report.rs). Needs `chromium` (apt install chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo run --release -q -- simulate multi-write --matrix all --rounds 300 --link rtt=1ms,jitter=200us,loss=0.5% --report "$tmp/report.html" >/dev/null
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile" \
  --window-size=1200,2000 --screenshot="$PWD/docs/report-screenshot.png" "file://$tmp/report.html" 2>/dev/null
echo "wrote docs/report-screenshot.png"
