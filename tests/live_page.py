#!/usr/bin/env python3
"""Loads the master's live page in headless chromium and returns what it shows.

  python3 tests/live_page.py URL [--screenshot FILE] [--budget-ms MS] [--chromium PATH]
                             [--ready-within S]

prints the snapshot of URL (the page at `/` of a running master) as JSON, and with
--screenshot also saves a PNG of it. Standard library only, plus Debian's chromium
(/usr/bin/chromium).

The page's DOM contract is documented at the top of monitoring/page/live.html. Chromium runs
with --virtual-time-budget: timers fast-forward while the page is idle and virtual time
pauses while a fetch is pending, so a budget of 3000 ms lets the page poll `api/run` about
three times (once on load, then every virtual second) before the DOM is dumped.

Library use:
  snapshot(url) -> {"ready": bool, "polls": int, "state": str, "step": int or None,
                    "connection": str, "header": {id: text},
                    "series": {"train": {"points": n, "last": [step, value]}, ...},
                    "marks": [{"chart": svg id, "kind": "relaunch", "step": int,
                               "label": str, "drawn": bool}, ...],
                    "workers": [{"host", "worker", "state", "restarts", "pid",
                                 "heartbeat", "samples"}, ...]}
  wait_for_points(url, series=("train",), timeout_s=60) -> snapshot with points in each series
  screenshot(url, path, size=(1280, 1000)) -> path of a non-empty PNG
Each raises LivePageError with the reason (chromium missing, timed out, failed, no points).
"""

import argparse
import html.parser
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

CHROMIUM = "/usr/bin/chromium"
# Header values the page exposes by id (see live.html).
HEADER_IDS = ("state", "step", "epoch", "epochs", "total-steps", "loss", "lr", "samples-per-s",
              "eta", "mode", "topology", "version", "conn", "relaunch")
WORKER_CELLS = ("state", "restarts", "pid", "heartbeat", "samples")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class LivePageError(RuntimeError):
    """Chromium is missing, failed or timed out, or the page did not show what was asked."""


def _tail(text, lines=8):
    """The last lines of chromium's stderr, without its usual noise (no D-Bus in a container,
    a /dev/shm test in Debian's launcher script)."""
    keep = [line for line in text.strip().splitlines()
            if "dbus/" not in line and "unexpected operator" not in line]
    return "\n".join(keep[-lines:])


def _run_chromium(chromium, url, extra, timeout_s):
    """Runs chromium headless on url with a throwaway profile; returns the CompletedProcess."""
    if not (os.path.isfile(chromium) and os.access(chromium, os.X_OK)):
        raise LivePageError(f"{chromium} not found: install Debian's chromium "
                            "(apt-get install --no-install-recommends chromium)")
    profile = tempfile.mkdtemp(prefix="live_page_")
    cmd = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
           "--no-first-run", "--no-default-browser-check", "--disable-extensions",
           "--mute-audio", f"--user-data-dir={profile}",
           # No connections of chromium's own: on a machine without a network each is refused,
           # many at a time, beside the one load that matters.
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-quic"] + extra + [url]
    try:
        # start_new_session: on a timeout the whole process group (chromium's helpers
        # included) is killed, not only the launcher script.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            raise LivePageError(f"chromium timed out after {timeout_s} s on {url}") from None
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return subprocess.CompletedProcess(cmd, proc.returncode,
                                       out.decode("utf-8", "replace"),
                                       err.decode("utf-8", "replace"))


def _kill_group(proc):
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _timeout(budget_ms):
    # The virtual budget usually elapses far faster than real time; allow for a slow start.
    return 30 + 2 * budget_ms / 1000


class _PageParser(html.parser.HTMLParser):
    """Collects the contract's elements from the dumped DOM."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.body = {}
        self.text = {}  # id -> text
        self.series = {}  # name -> attrs
        self.marks = []  # [{"chart", "kind", "step", "label", "drawn"}] in document order
        self._chart = None  # id of the chart <svg> being read
        self._mark = None  # the mark whose <g> is open
        self.workers = []  # [{"attrs": {...}, "cells": {class: text}}]
        self._captures = []  # [(key, depth at start)] of open text captures
        self._depth = 0
        self._in_workers = None  # depth of <table id="workers"> while open
        self._row = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if a.get("data-series"):
            self.series[a["data-series"]] = a
        if tag == "svg" and "chart" in (a.get("class") or "").split():
            self._chart = a.get("id")
        if a.get("data-mark"):
            self._mark = {"chart": self._chart, "kind": a["data-mark"],
                          "step": _int(a.get("data-step")), "label": a.get("data-label"),
                          "drawn": False}
            self.marks.append(self._mark)
        elif self._mark is not None and tag == "line":
            self._mark["drawn"] = True  # its vertical line, inside its <g>
        if tag in VOID:
            return
        self._depth += 1
        if a.get("id") in HEADER_IDS:
            self._captures.append((("id", a["id"]), self._depth))
            self.text[a["id"]] = ""
        if tag == "table" and a.get("id") == "workers":
            self._in_workers = self._depth
        elif self._in_workers is not None and tag == "tr" and "data-host" in a:
            self._row = {"attrs": a, "cells": {}}
            self.workers.append(self._row)
        elif self._row is not None and tag == "td":
            cls = (a.get("class") or "").split()
            if cls:
                self._row["cells"][cls[0]] = ""
                self._captures.append((("cell", cls[0]), self._depth))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if tag == "g":
            self._mark = None
        if tag in VOID:
            return
        while self._captures and self._captures[-1][1] >= self._depth:
            self._captures.pop()
        if self._in_workers is not None:
            if tag == "tr":
                self._row = None
            if self._depth <= self._in_workers:
                self._in_workers = None
        self._depth -= 1

    def handle_data(self, data):
        for (kind, key), _ in self._captures:
            if kind == "id":
                self.text[key] += data
            elif self._row is not None:
                self._row["cells"][key] += data


def _int(text):
    try:
        return int(str(text).replace(",", "").strip())
    except (TypeError, ValueError):
        return None


def _json(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def parse_dom(dom):
    """The snapshot dict of a dumped DOM (see the module's docstring)."""
    p = _PageParser()
    p.feed(dom)
    p.close()
    header = {k: " ".join(v.split()) for k, v in p.text.items()}
    series = {name: {"points": _int(a.get("data-points")), "last": _json(a.get("data-last"))}
              for name, a in p.series.items()}
    workers = []
    for row in p.workers:
        cells = {k: " ".join(v.split()) for k, v in row["cells"].items()}
        w = {"host": _int(row["attrs"].get("data-host")),
             "worker": _int(row["attrs"].get("data-worker"))}
        for k in WORKER_CELLS:
            w[k] = cells.get(k)
        for k in ("restarts", "pid"):
            n = _int(w[k])
            w[k] = n if n is not None else w[k]
        workers.append(w)
    return {
        "ready": p.body.get("data-ready") == "1",
        "polls": _int(p.body.get("data-polls")) or 0,
        "state": header.get("state", ""),
        "step": _int(header.get("step")),
        "connection": header.get("conn", ""),
        "header": header,
        "series": series,
        "marks": p.marks,
        "workers": workers,
    }


def snapshot(url, chromium=CHROMIUM, budget_ms=3000):
    """Loads url in headless chromium for budget_ms of virtual time; returns what it shows."""
    r = _run_chromium(chromium, url, ["--dump-dom", f"--virtual-time-budget={int(budget_ms)}"],
                      _timeout(budget_ms))
    if r.returncode != 0 or "<html" not in r.stdout.lower() or "Page load failed" in r.stderr:
        raise LivePageError(f"chromium --dump-dom failed on {url} (exit {r.returncode}):\n"
                            + _tail(r.stderr))
    return parse_dom(r.stdout)


def _summary(snap):
    if snap is None:
        return "nothing (no snapshot succeeded)"
    return json.dumps({k: snap.get(k) for k in ("ready", "polls", "state", "step",
                                                "connection", "series")})


def wait_for_points(url, series=("train",), timeout_s=60, **kw):
    """Snapshots url until every named series has at least one point; returns that snapshot.

    kw goes to snapshot(). Raises LivePageError with the last snapshot seen on timeout."""
    deadline = time.monotonic() + timeout_s
    last, error = None, None
    while True:
        try:
            last = snapshot(url, **kw)
            error = None
            if last["ready"] and all((last["series"].get(s) or {}).get("points", 0) or 0
                                     for s in series):
                return last
        except LivePageError as e:
            if "install Debian's chromium" in str(e):
                raise
            error = e
        if time.monotonic() >= deadline:
            why = f"; last error: {error}" if error else ""
            raise LivePageError(f"no points in {list(series)} on {url} after {timeout_s} s; "
                                f"last seen: {_summary(last)}{why}")
        time.sleep(0.5)


def screenshot(url, path, size=(1280, 1000), budget_ms=3000, chromium=CHROMIUM):
    """Saves a PNG of url at size (width, height); returns path once it exists, non-empty."""
    path = os.path.abspath(path)
    if os.path.exists(path):
        os.remove(path)
    w, h = size
    r = _run_chromium(chromium, url, [f"--screenshot={path}", f"--window-size={w},{h}",
                                      "--hide-scrollbars",
                                      f"--virtual-time-budget={int(budget_ms)}"],
                      _timeout(budget_ms))
    if "Page load failed" in r.stderr or not (os.path.isfile(path)
                                               and os.path.getsize(path) > 0):
        raise LivePageError(f"chromium --screenshot failed on {url}, no PNG at {path} "
                            f"(exit {r.returncode}):\n" + _tail(r.stderr))
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description="Snapshot of shmtrain's live page, as JSON.")
    ap.add_argument("url", help="the page, e.g. http://127.0.0.1:9464/")
    ap.add_argument("--screenshot", metavar="FILE", help="also save a 1280x1000 PNG here")
    ap.add_argument("--budget-ms", type=int, default=3000,
                    help="virtual time the page runs before the dump (default 3000)")
    ap.add_argument("--chromium", default=CHROMIUM, help=f"browser (default {CHROMIUM})")
    ap.add_argument("--ready-within", type=float, metavar="S",
                    help="snapshot again until the page is ready, for at most S seconds (a "
                         "loaded machine may need more than one budget)")
    a = ap.parse_args(argv)
    try:
        if a.ready_within:
            snap = wait_for_points(a.url, series=(), timeout_s=a.ready_within,
                                   chromium=a.chromium, budget_ms=a.budget_ms)
        else:
            snap = snapshot(a.url, chromium=a.chromium, budget_ms=a.budget_ms)
        print(json.dumps(snap, indent=1))
        if a.screenshot:
            print("screenshot:", screenshot(a.url, a.screenshot, budget_ms=a.budget_ms,
                                            chromium=a.chromium), file=sys.stderr)
    except LivePageError as e:
        print(f"live_page: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
