#!/usr/bin/env bash
# A screenshot of a Snakemake report as a browser draws it (headless Chromium), to see that it renders.
# Not part of the tests: the project does not install Chromium (Debian: apt-get install chromium);
# tests/pipeline/test_pipeline.py checks the report's HTML and embedded results instead.
#
#   workflow/scripts/report_screenshot.sh report.html report.png                       # the first page
#   workflow/scripts/report_screenshot.sh report.html fig.png figures/fig7_scaleout.png   # one result open
#
# With a result (its path as the report lists it), the report's own app opens it first: the result's
# caption in the side panel and, for a figure, the figure beside it.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
    echo "usage: $0 REPORT.html OUT.png [RESULT_PATH]" >&2
    exit 2
fi
report=$(realpath "$1")
out=$(realpath -m "$2")
result=${3:-}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z $browser ]]; then
    echo "$0: no chromium on PATH (Debian: apt-get install chromium)" >&2
    exit 1
fi
if ! grep -q '<script id="results">' "$report"; then
    echo "$0: $1 is not a Snakemake HTML report (no results script)" >&2
    exit 1
fi

page=$report
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -n $result ]]; then
    # the same page, with a last script that opens the result once the app has drawn
    page=$tmp/report.html
    python3 - "$report" "$page" "$result" <<'EOF'
import json, sys
src, dst, result = sys.argv[1:]
html = open(src, encoding="utf-8").read()
if f'"{result}": {{' not in html:
    sys.exit(f"report_screenshot.sh: {src} holds no result {result!r}")
path = json.dumps(result)
# one setView: two in a row would merge against the same old state and lose the first
js = (f"<script>setTimeout(function () {{ var r = results[{path}]; var v = {{navbarMode: 'resultinfo', "
      f"resultPath: {path}}}; if (r.mime_type.startsWith('image/')) {{ v.content = 'img'; "
      f"v.contentPath = r.data_uri; }} app.setView(v); }}, 500);</script>")
at = html.rindex("</body>")
open(dst, "w", encoding="utf-8").write(html[:at] + js + html[at:])
EOF
fi

"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1600,1000 \
    --virtual-time-budget=5000 --screenshot="$out" "file://$page" 2>/dev/null
test -s "$out"
echo "$out"
