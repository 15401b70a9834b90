"""Check the built documentation site in a real headless browser.

    hatch run docs:build && hatch run docs:check      # or: python docs/check_site.py [--out DIR]

Serves ``site/`` on 127.0.0.1, opens the home page and an API page in headless Chromium, takes a
screenshot of each (``site-check/*.png``) and checks that the headings each page must show are
in the DOM the browser rendered. Exits 0 with "no headless browser found, skipped" when no
Chromium is on the PATH (``apt-get install chromium`` brings one), 1 when a page lacks a
heading or the browser fails.
"""

from __future__ import annotations

import argparse
import functools
import html.parser
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
#: page (relative to the site) → screenshot name, headings (h1-h3) it must show
PAGES = {
    "": ("home", ["Kestrel", "Where to start", "Four packages"]),
    "reference/api/kestrel/": (
        "api_kestrel",
        ["kestrel", "A trained run as an object", "open_run", "Run", "Posterior", "launch"],
    ),
    "reference/cli/": ("cli", ["Command line", "kestrel launch", "kestrel check calibration"]),
}


class _Headings(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self._open: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("h1", "h2", "h3"):
            self._open = []

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3") and self._open is not None:
            self.headings.append(" ".join("".join(self._open).split()).rstrip("¶").strip())
            self._open = None

    def handle_data(self, data):
        if self._open is not None:
            self._open.append(data)


def headings(dom: str) -> list[str]:
    parser = _Headings()
    parser.feed(dom)
    return parser.headings


def _browser(argv: list[str], timeout: float = 90) -> subprocess.CompletedProcess:
    flags = ["--headless=new", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1000"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        flags.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [argv[0], *flags, f"--user-data-dir={profile}", *argv[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", default=str(ROOT / "site"), help="the built site")
    parser.add_argument("--out", default=str(ROOT / "site-check"), help="screenshot folder")
    args = parser.parse_args(argv)

    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        print("check_site: no headless browser found, skipped (apt-get install chromium)")
        return 0
    site = Path(args.site)
    if not (site / "index.html").is_file():
        print(f"check_site: {site}/index.html missing: build the site first (hatch run docs:build)")
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    failed: set[str] = set()
    try:
        for page, (name, expected) in PAGES.items():
            url = base + page
            dom = _browser([browser, "--dump-dom", url])
            found = headings(dom.stdout)
            missing = [h for h in expected if h not in found]
            shot = out / f"{name}.png"
            snap = _browser([browser, f"--screenshot={shot}", url])
            if dom.returncode or not found:
                print(f"check_site: {url}: the browser rendered no headings ({dom.stderr[-500:]})")
                failed.add(page)
            elif missing:
                print(f"check_site: {url}: missing headings {missing}; found {found}")
                failed.add(page)
            else:
                print(f"check_site: {url}: {len(found)} headings, all of {expected}")
            if snap.returncode or not shot.is_file() or shot.stat().st_size == 0:
                print(f"check_site: {url}: no screenshot ({snap.stderr[-500:]})")
                failed.add(page)
            else:
                print(f"check_site: screenshot {shot} ({shot.stat().st_size} bytes)")
    finally:
        server.shutdown()
    print(f"check_site: {len(PAGES) - len(failed)} of {len(PAGES)} pages passed with {browser}")
    return 1 if failed else 0


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the signature of the base class
        pass


if __name__ == "__main__":
    sys.exit(main())
