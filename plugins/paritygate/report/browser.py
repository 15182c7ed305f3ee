"""Open the HTML report in headless Chromium: a screenshot of the first screen, and the rendered layout (where
the verdict banner, the matrix and the first failure's cause land), read back from the DOM Chromium dumps.

    python -m paritygate.report.browser parity-report/parity-report.html   # writes parity-report.png beside it

Chromium is Debian's package (`apt-get install chromium`); PARITYGATE_CHROMIUM names another binary.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH, HEIGHT = 1400, 900  # the reviewer's first screen: a 1400 px wide window, no scrolling
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-extensions", "--mute-audio", "--allow-file-access-from-files")
# Elements whose boxes are measured: the selector and the name they get in the layout.
MEASURED = {"verdict": "#verdict", "matrix": "#matrix", "first_cause": "#failing article .cause",
            "first_plot": "#failing article .plots svg"}
PROBE = """<script>(function(){var out={viewport:[innerWidth,innerHeight],
scroll_width:document.documentElement.scrollWidth,boxes:{}};var sel=%s;
for(var k in sel){var e=document.querySelector(sel[k]);if(e){var r=e.getBoundingClientRect();
out.boxes[k]=[r.left,r.top,r.right,r.bottom];}}
var p=document.createElement('pre');p.id='paritygate-layout';p.textContent=JSON.stringify(out);
document.body.appendChild(p);})();</script>"""


class BrowserError(RuntimeError):
    """Chromium is missing or failed; the message names the binary and its output."""


def find_chromium():
    """The Chromium binary, or None."""
    named = os.environ.get("PARITYGATE_CHROMIUM")
    if named:
        return shutil.which(named) or (named if Path(named).is_file() else None)
    return next((found for found in map(shutil.which, NAMES) if found), None)


def _run(args, timeout=120):
    binary = find_chromium()
    if binary is None:
        raise BrowserError(f"no headless Chromium found (looked for {', '.join(NAMES)} on PATH and "
                           "$PARITYGATE_CHROMIUM); Debian/Ubuntu: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="paritygate-chromium-") as profile:
        cmd = [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise BrowserError(f"{binary} exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def screenshot(html_path, png_path=None):
    """Save the first screen (WIDTH x HEIGHT) of the report as a PNG; returns its path."""
    html_path = Path(html_path).resolve()
    png_path = Path(png_path or html_path.with_suffix(".png")).resolve()
    _run([f"--screenshot={png_path}", html_path.as_uri()])
    if not png_path.is_file():
        raise BrowserError(f"Chromium wrote no screenshot to {png_path}")
    return png_path


def layout(html_path):
    """{"viewport": [w, h], "scroll_width": px, "boxes": {name: [left, top, right, bottom]}} as rendered."""
    text = Path(html_path).read_text()
    probe = PROBE % json.dumps(MEASURED)
    with tempfile.TemporaryDirectory(prefix="paritygate-layout-") as folder:
        copy = Path(folder) / "report.html"  # the report itself holds no script; the probe goes into a copy
        copy.write_text(text.replace("</body>", probe + "</body>") if "</body>" in text else text + probe)
        dom = _run(["--dump-dom", copy.as_uri()])
    m = re.search(r'<pre id="paritygate-layout">(.*?)</pre>', dom, re.DOTALL)
    if not m:
        raise BrowserError(f"the layout probe did not run in {html_path} (dumped DOM: {dom[:300]!r})")
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2):
        print("usage: python -m paritygate.report.browser REPORT.html [SCREENSHOT.png]", file=sys.stderr)
        return 2
    try:
        print(screenshot(*argv))
    except BrowserError as err:
        print(f"paritygate.report.browser: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
