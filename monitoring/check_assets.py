#!/usr/bin/env python3
"""Checks the monitoring assets in this folder (standard library only).

  python3 monitoring/check_assets.py [--scrape FILE]

1. grafana-dashboard.json: valid JSON, schemaVersion pinned to 39, uid/title "shmtrain", a
   `datasource` template variable (type datasource, query prometheus), a `host` template
   variable (a multi-select query of label_values(..., host) with All), and for every panel: a
   supported type, a description, a known unit in fieldConfig.defaults.unit, the datasource
   {"type": "prometheus", "uid": "${datasource}"} (on the panel and on each target), a gridPos
   inside the 24-column grid that overlaps no other panel, a unique id, and in every target's
   expression the host filter host=~"$host" on every shmtrain_ series selector.
2. alerts.yml: every alert has `for:`, a severity label, a summary and a description.
3. Extracts every metric name (identifiers starting with shmtrain_) from the dashboard's
   expressions (panel targets and template variable queries) and from the `expr:` of
   alerts.yml, folds histogram series (_bucket/_sum/_count) into their histogram, checks each
   against the exporter's metric list below, and prints them.
4. README.md documents every exporter metric and every alert.
5. With --scrape FILE (a text exposition captured from a running exporter, e.g.
   `curl -s http://127.0.0.1:9464/metrics > scrape.txt`): every referenced metric exists in
   the scrape (for a histogram: its _bucket, _sum and _count series) with the expected type
   (the validation gauges only once the run has validated), and every shmtrain_ sample
   carries the host label.

Exits 0 when everything passes, 1 listing every failure otherwise, 2 on a usage or I/O error.
"""

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# The metrics the shmtrain exporter serves: name -> (type, labels, mode that exports it or None).
# Every series also carries HOST_LABEL (the host index of the master that serves it).
HOST_LABEL = "host"
METRICS = {
    "shmtrain_build_info": ("gauge", ("version", "mode", "rule"), None),
    "shmtrain_hosts": ("gauge", (), None),
    "shmtrain_workers": ("gauge", (), None),
    "shmtrain_worker_up": ("gauge", ("worker",), None),
    "shmtrain_steps_total": ("counter", (), None),
    "shmtrain_target_steps": ("gauge", (), None),
    "shmtrain_samples_total": ("counter", ("worker",), None),
    "shmtrain_loss": ("gauge", (), None),
    "shmtrain_learning_rate": ("gauge", (), None),
    "shmtrain_grad_norm": ("gauge", (), None),
    "shmtrain_step_duration_seconds": ("histogram", (), None),
    "shmtrain_barrier_wait_seconds": ("histogram", ("worker",), "sync"),
    "shmtrain_update_staleness": ("histogram", (), "async"),
    "shmtrain_param_version": ("gauge", (), None),
    "shmtrain_dropped_gradients_total": ("counter", (), None),
    "shmtrain_worker_restarts_total": ("counter", ("worker", "reason"), None),
    "shmtrain_worker_heartbeat_age_seconds": ("gauge", ("worker",), None),
    "shmtrain_worker_compute_seconds_total": ("counter", ("worker",), None),
    "shmtrain_worker_reduce_seconds_total": ("counter", ("worker",), None),
    "shmtrain_worker_crossing_wait_seconds_total": ("counter", ("worker",), None),
    "shmtrain_recovery_duration_seconds": ("histogram", (), None),
    "shmtrain_torn_updates_total": ("counter", (), None),
    "shmtrain_checkpoint_duration_seconds": ("histogram", (), None),
    "shmtrain_checkpoint_last_success_timestamp_seconds": ("gauge", (), None),
    "shmtrain_checkpoint_failures_total": ("counter", (), None),
    "shmtrain_host_combine_seconds": ("histogram", (), None),
    # Async across hosts; served always (zeros until the exchange pushes).
    "shmtrain_host_pushes_total": ("counter", (), None),
    "shmtrain_host_push_bytes_total": ("counter", (), None),
    "shmtrain_host_pushes_applied_total": ("counter", (), None),
    "shmtrain_host_pushes_dropped_total": ("counter", (), None),
    "shmtrain_host_push_staleness": ("histogram", (), None),
    "shmtrain_host_last_push_timestamp_seconds": ("gauge", (), None),
    # A relaunched job's counts by reason (SHMTRAIN_RELAUNCH); served always, 0 otherwise.
    "shmtrain_relaunches_total": ("counter", ("reason",), None),
    # Only once a run with held-out data has validated (absent otherwise: empty panels).
    "shmtrain_validation_loss": ("gauge", (), None),
    "shmtrain_validation_accuracy": ("gauge", (), None),
    "shmtrain_validation_rmse": ("gauge", (), None),
}
# Metrics a scrape may lack altogether: served only once the run has validated, and then
# accuracy (--loss xent) or RMSE (the other losses), never both.
AFTER_VALIDATION = {"shmtrain_validation_loss", "shmtrain_validation_accuracy",
                    "shmtrain_validation_rmse"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

EXPECTED_DS = {"type": "prometheus", "uid": "${datasource}"}
PANEL_TYPES = {"timeseries", "stat"}
SCHEMA_VERSION = 39

# Grafana unit ids (a subset of Grafana's unit list, covering what a dashboard like this uses).
KNOWN_UNITS = {
    "none", "short", "sishort", "percent", "percentunit", "humidity", "dB", "hex0x", "hex",
    "sci", "locale", "pixel", "bool", "bool_yes_no", "bool_on_off",
    # time
    "ns", "µs", "us", "ms", "s", "m", "h", "d", "dtdurationms", "dtdurations", "dthms",
    "dtdhms", "timeticks", "clockms", "clocks", "hertz",
    # throughput
    "cps", "ops", "reqps", "rps", "wps", "iops", "eps", "mps", "cpm", "opm", "reqpm", "rpm",
    "wpm", "epm", "mpm",
    # data
    "bits", "bytes", "kbytes", "mbytes", "gbytes", "tbytes", "pbytes", "decbits", "decbytes",
    "deckbytes", "decmbytes", "decgbytes", "dectbytes", "decpbytes",
    "bps", "Bps", "binbps", "binBps", "KiBs", "Kibits", "MiBs", "Mibits", "GiBs", "Gibits",
    "TiBs", "Tibits", "pps", "Kbits", "KBs", "Mbits", "MBs", "Gbits", "GBs", "Tbits", "TBs",
}
CUSTOM_UNIT_PREFIXES = ("suffix:", "prefix:", "si:", "count:", "currency:", "time:")

METRIC_RE = re.compile(r"(?<![A-Za-z0-9_:])shmtrain_[A-Za-z0-9_:]*")
STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
GROUPING_RE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
LABELS_RE = re.compile(r"\{[^}]*\}")
# A shmtrain_ series selector: the metric name and its label matchers, if any.
SELECTOR_RE = re.compile(r'(?<![A-Za-z0-9_:"])(shmtrain_[A-Za-z0-9_:]*)(\s*\{[^}]*\})?')
HOST_FILTER_RE = re.compile(r'[{,]\s*host\s*=~\s*"\$host"\s*[,}]')
HOST_QUERY_RE = re.compile(r"^\s*label_values\(\s*shmtrain_[A-Za-z0-9_:]*(\{[^}]*\})?\s*,\s*host\s*\)\s*$")


def metric_tokens(expr):
    """Metric-name tokens starting with shmtrain_ in a PromQL expression (not label names,
    not label values, not grouping labels)."""
    text = STRING_RE.sub('""', expr)
    text = re.sub(r"#[^\n]*", "", text)            # PromQL comments
    text = GROUPING_RE.sub("()", text)
    text = LABELS_RE.sub("{}", text)
    return METRIC_RE.findall(text)


def unfiltered_selectors(expr):
    """The shmtrain_ series selectors of a PromQL expression without the host=~"$host"
    filter (comments ignored)."""
    text = re.sub(r"#[^\n]*", "", expr)
    return [m.group(0).strip() for m in SELECTOR_RE.finditer(text)
            if not HOST_FILTER_RE.search(m.group(2) or "")]


class Report:
    def __init__(self):
        self.failures = []
        self.notes = []

    def fail(self, msg):
        self.failures.append(msg)

    def note(self, msg):
        self.notes.append(msg)


def read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        print(f"check_assets: cannot read {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)


# ------------------------------------------------------------------------------- dashboard

def iter_panels(panels):
    for p in panels:
        yield p
        if isinstance(p, dict) and isinstance(p.get("panels"), list):
            yield from iter_panels(p["panels"])


def check_dashboard(path, rep):
    """Returns [(where, expr)] for every PromQL expression of the dashboard."""
    name = os.path.basename(path)
    try:
        dash = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        rep.fail(f"{name}: not valid JSON: {e}")
        return []
    if not isinstance(dash, dict):
        rep.fail(f"{name}: the top level is not a JSON object")
        return []
    exprs = []

    sv = dash.get("schemaVersion")
    if not (isinstance(sv, int) and not isinstance(sv, bool) and sv == SCHEMA_VERSION):
        rep.fail(f"{name}: schemaVersion must be pinned to {SCHEMA_VERSION} (found {sv!r})")
    for key in ("uid", "title"):
        if dash.get(key) != "shmtrain":
            rep.fail(f'{name}: {key} must be "shmtrain" (found {dash.get(key)!r})')

    variables = (dash.get("templating") or {}).get("list")
    if not isinstance(variables, list):
        rep.fail(f"{name}: templating.list is missing")
        variables = []
    ds_vars = [v for v in variables if isinstance(v, dict) and v.get("name") == "datasource"]
    if len(ds_vars) != 1:
        rep.fail(f"{name}: expected exactly one template variable named 'datasource', "
                 f"found {len(ds_vars)}")
    else:
        v = ds_vars[0]
        if v.get("type") != "datasource" or v.get("query") != "prometheus":
            rep.fail(f"{name}: variable 'datasource' must have type 'datasource' and query "
                     f"'prometheus' (found type {v.get('type')!r}, query {v.get('query')!r})")
    check_host_variable(name, variables, rep)
    for v in variables:
        if not isinstance(v, dict) or v.get("type") != "query":
            continue
        vname = v.get("name")
        if v.get("datasource") != EXPECTED_DS:
            rep.fail(f"{name}: variable {vname!r}: datasource must be {json.dumps(EXPECTED_DS)} "
                     f"(found {json.dumps(v.get('datasource'))})")
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if isinstance(q, str) and q:
            exprs.append((f"dashboard variable ${vname}", q))
        else:
            rep.fail(f"{name}: variable {vname!r} has no query")

    panels = dash.get("panels")
    if not isinstance(panels, list) or not panels:
        rep.fail(f"{name}: no panels")
        return exprs

    ids = {}
    rects = []
    for p in iter_panels(panels):
        if not isinstance(p, dict):
            rep.fail(f"{name}: a panel is not a JSON object")
            continue
        pid = p.get("id")
        title = p.get("title") or "(untitled)"
        label = f"{name}: panel {pid!r} {title!r}"
        if not isinstance(pid, int) or isinstance(pid, bool):
            rep.fail(f"{label}: id must be an integer")
        elif pid in ids:
            rep.fail(f"{label}: id {pid} is also used by panel {ids[pid]!r}")
        else:
            ids[pid] = title

        gp = p.get("gridPos")
        if not (isinstance(gp, dict)
                and all(isinstance(gp.get(k), int) for k in ("x", "y", "w", "h"))):
            rep.fail(f"{label}: gridPos must have integer x, y, w, h")
        elif gp["x"] < 0 or gp["y"] < 0 or gp["w"] < 1 or gp["h"] < 1 or gp["x"] + gp["w"] > 24:
            rep.fail(f"{label}: gridPos {gp} lies outside the 24-column grid")
        elif p.get("type") != "row":
            for other_title, o in rects:
                if (gp["x"] < o["x"] + o["w"] and o["x"] < gp["x"] + gp["w"]
                        and gp["y"] < o["y"] + o["h"] and o["y"] < gp["y"] + gp["h"]):
                    rep.fail(f"{label}: gridPos overlaps panel {other_title!r}")
            rects.append((title, gp))

        if p.get("type") == "row":
            continue
        if p.get("type") not in PANEL_TYPES:
            rep.fail(f"{label}: type {p.get('type')!r} is not one of {sorted(PANEL_TYPES)}")
        desc = p.get("description")
        if not isinstance(desc, str) or not desc.strip():
            rep.fail(f"{label}: no description")
        unit = ((p.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
        if not isinstance(unit, str) or not unit:
            rep.fail(f"{label}: no fieldConfig.defaults.unit")
        elif unit not in KNOWN_UNITS and not unit.startswith(CUSTOM_UNIT_PREFIXES):
            rep.fail(f"{label}: unit {unit!r} is not a known Grafana unit id")
        if p.get("datasource") != EXPECTED_DS:
            rep.fail(f"{label}: datasource must be {json.dumps(EXPECTED_DS)} "
                     f"(found {json.dumps(p.get('datasource'))})")
        targets = p.get("targets")
        if not isinstance(targets, list) or not targets:
            rep.fail(f"{label}: no targets")
            continue
        refids = set()
        for t in targets:
            if not isinstance(t, dict):
                rep.fail(f"{label}: a target is not a JSON object")
                continue
            ref = t.get("refId")
            if not ref or ref in refids:
                rep.fail(f"{label}: target refId {ref!r} is missing or repeated")
            refids.add(ref)
            if "datasource" in t and t["datasource"] != EXPECTED_DS:
                rep.fail(f"{label}: target {ref}: datasource must be {json.dumps(EXPECTED_DS)} "
                         f"(found {json.dumps(t['datasource'])})")
            expr = t.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                rep.fail(f"{label}: target {ref} has no expr")
                continue
            exprs.append((f"dashboard panel {title!r}", expr))
            for sel in unfiltered_selectors(expr):
                rep.fail(f'{label}: target {ref}: {sel} lacks the host filter host=~"$host"')
    return exprs


def check_host_variable(name, variables, rep):
    """The `host` template variable: a multi-select query of the host label values, with All."""
    host_vars = [v for v in variables if isinstance(v, dict) and v.get("name") == HOST_LABEL]
    if len(host_vars) != 1:
        rep.fail(f"{name}: expected exactly one template variable named 'host', "
                 f"found {len(host_vars)}")
        return
    v = host_vars[0]
    q = v.get("query")
    if isinstance(q, dict):
        q = q.get("query")
    if v.get("type") != "query" or not isinstance(q, str) or not HOST_QUERY_RE.match(q):
        rep.fail(f"{name}: variable 'host' must be a query of label_values(shmtrain_..., host) "
                 f"(found type {v.get('type')!r}, query {q!r})")
    if v.get("multi") is not True or v.get("includeAll") is not True:
        rep.fail(f"{name}: variable 'host' must be multi-select with All (found multi "
                 f"{v.get('multi')!r}, includeAll {v.get('includeAll')!r})")


# ------------------------------------------------------------------------------ alerts.yml

BLOCK_RE = re.compile(r"^[|>][0-9+-]*\s*(#.*)?$")


def indent_of(line):
    return len(line) - len(line.lstrip(" "))


def unquote(value):
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return re.sub(r"\s+#.*$", "", value)          # plain scalar: drop a trailing comment


def parse_rules(text):
    """Minimal reader for a Prometheus rule file: returns a list of rules, each a dict with
    'kind' (alert/record), 'name', 'expr', 'keys' (every `key:` seen in the rule's block) and
    'line'. Handles single-line, quoted, multi-line plain and block (| >) expressions."""
    lines = text.splitlines()
    rules = []
    cur = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        m = re.match(r"^(\s*)-\s+(alert|record):\s*(.*)$", line)
        if m:
            cur = {"kind": m.group(2), "name": unquote(m.group(3)), "expr": None,
                   "keys": set(), "line": i + 1, "indent": len(m.group(1))}
            rules.append(cur)
            i += 1
            continue
        if cur is not None and indent_of(line) <= cur["indent"]:
            cur = None                             # left the rule's block
        m = re.match(r"^(\s*)(?:-\s+)?([A-Za-z_][A-Za-z0-9_]*):(?:\s+(.*))?$", line)
        if not m:
            i += 1
            continue
        key_indent, key, value = len(m.group(1)), m.group(2), (m.group(3) or "")
        if cur is not None:
            cur["keys"].add(key)
            if value.strip().startswith("{"):      # flow mapping: labels: {severity: x}
                cur["keys"].update(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*:", value))
        if key != "expr":
            i += 1
            continue
        body = []
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or indent_of(lines[j]) > key_indent):
            body.append(lines[j])
            j += 1
        while body and not body[-1].strip():
            body.pop()
        if BLOCK_RE.match(value.strip()):
            expr = "\n".join(body)
        else:
            expr = unquote(" ".join([value] + [b.strip() for b in body]))
        if cur is not None:
            cur["expr"] = expr
        else:
            rules.append({"kind": "expr", "name": f"line {i + 1}", "expr": expr,
                          "keys": set(), "line": i + 1, "indent": key_indent})
        i = j
    return rules


def check_alerts(path, rep):
    name = os.path.basename(path)
    rules = parse_rules(read_text(path))
    exprs = []
    alerts = []
    for r in rules:
        if r["kind"] == "alert":
            alerts.append(r["name"])
            for key in ("for", "severity", "summary", "description"):
                if key not in r["keys"]:
                    rep.fail(f"{name}:{r['line']}: alert {r['name']} has no {key}")
        if not r["expr"] or not r["expr"].strip():
            rep.fail(f"{name}:{r['line']}: {r['kind']} {r['name']} has no expr")
            continue
        exprs.append((f"alert {r['name']}", r["expr"]))
    if not alerts:
        rep.fail(f"{name}: no alerting rules found")
    return exprs, alerts


# ------------------------------------------------------------------------------ metrics

def fold_metrics(exprs, rep, histograms):
    """{base name: {"where": set, "suffixes": set}} for every shmtrain_ metric referenced."""
    found = {}
    for where, expr in exprs:
        for tok in metric_tokens(expr):
            base, suffix = tok, ""
            for suf in HISTOGRAM_SUFFIXES:
                if tok.endswith(suf) and tok[: -len(suf)] in histograms:
                    base, suffix = tok[: -len(suf)], suf
                    break
            entry = found.setdefault(base, {"where": set(), "suffixes": set()})
            entry["where"].add(where)
            entry["suffixes"].add(suffix)
    return found


def check_catalog(found, rep):
    for base, entry in sorted(found.items()):
        where = "; ".join(sorted(entry["where"]))
        if base not in METRICS:
            rep.fail(f"{base}: not a metric the exporter serves (used by {where})")
            continue
        if METRICS[base][0] == "histogram" and "" in entry["suffixes"]:
            rep.fail(f"{base}: is a histogram; query {base}_bucket, _sum or _count instead "
                     f"(used by {where})")


def parse_scrape(path):
    """(sample names, {name: type} from # TYPE lines, build_info mode or None, shmtrain_ sample
    lines without the host label)."""
    samples, types, mode, unlabelled = set(), {}, None, []
    for raw in read_text(path).splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split()
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3]
            continue
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)", line)
        if not m:
            continue
        samples.add(m.group(1))
        if (m.group(1).startswith("shmtrain_")
                and not re.search(r'[{,]' + HOST_LABEL + r'="[^"]*"', line)):
            unlabelled.append(line)
        if m.group(1) == "shmtrain_build_info":
            mm = re.search(r'\bmode="([^"]*)"', line)
            if mm:
                mode = mm.group(1)
    return samples, types, mode, unlabelled


def check_scrape(path, found, rep):
    samples, types, mode, unlabelled = parse_scrape(path)
    name = os.path.basename(path)
    for line in unlabelled:
        rep.fail(f"{name}: sample without the {HOST_LABEL} label: {line}")
    if not any(s.startswith("shmtrain_") for s in samples):
        rep.fail(f"{name}: no shmtrain_ samples at all: is this a scrape of the shmtrain "
                 f"exporter?")
    missing = []
    for base in sorted(found):
        expected_type, _, only_mode = METRICS.get(base, (None, (), None))
        scraped_type = types.get(base)
        if scraped_type is None and base.endswith("_total"):
            scraped_type = types.get(base[: -len("_total")])   # OpenMetrics counter naming
        if expected_type and scraped_type and scraped_type != expected_type:
            rep.fail(f"{name}: {base} has # TYPE {scraped_type}, expected {expected_type}")
        if expected_type == "histogram" or scraped_type == "histogram":
            wanted = [base + s for s in HISTOGRAM_SUFFIXES]
        else:
            wanted = [base]
        absent = [w for w in wanted if w not in samples]
        if not absent:
            continue
        if len(absent) == len(wanted) and scraped_type is not None:
            rep.note(f"{base}: declared (# TYPE {scraped_type}) but has no samples yet")
            continue
        if len(absent) == len(wanted) and only_mode and mode and mode != only_mode:
            rep.note(f"{base}: absent; it is exported in {only_mode} mode only and this "
                     f"scrape is of a {mode} run")
            continue
        if len(absent) == len(wanted) and base in AFTER_VALIDATION:
            rep.note(f"{base}: absent; it is served once a run has validated (accuracy with "
                     f"--loss xent, RMSE otherwise)")
            continue
        missing.append((base, absent))
    for base, absent in missing:
        rep.fail(f"{name}: missing {', '.join(absent)} (used by "
                 f"{'; '.join(sorted(found[base]['where']))})")
    return len(missing)


# ------------------------------------------------------------------------------ README

def check_readme(path, alerts, rep):
    text = read_text(path)
    name = os.path.basename(path)
    for metric in sorted(METRICS):
        if not re.search(r"(?<![A-Za-z0-9_])" + re.escape(metric) + r"(?![A-Za-z0-9_])", text):
            rep.fail(f"{name}: metric {metric} is not documented")
    for alert in alerts:
        if alert not in text:
            rep.fail(f"{name}: alert {alert} is not documented")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dashboard", default=os.path.join(HERE, "grafana-dashboard.json"))
    ap.add_argument("--alerts", default=os.path.join(HERE, "alerts.yml"))
    ap.add_argument("--readme", default=os.path.join(HERE, "README.md"))
    ap.add_argument("--scrape", metavar="FILE",
                    help="text exposition captured from a running exporter")
    args = ap.parse_args()

    rep = Report()
    dash_exprs = check_dashboard(args.dashboard, rep)
    alert_exprs, alerts = check_alerts(args.alerts, rep)

    histograms = {n for n, (t, _, _) in METRICS.items() if t == "histogram"}
    scrape_types = {}
    if args.scrape:
        _, scrape_types, _, _ = parse_scrape(args.scrape)
        histograms |= {n for n, t in scrape_types.items() if t in ("histogram", "summary")}
    found = fold_metrics(dash_exprs + alert_exprs, rep, histograms)
    check_catalog(found, rep)
    check_readme(args.readme, alerts, rep)

    print(f"dashboard: {len(dash_exprs)} expressions; alerts.yml: {len(alerts)} alerts, "
          f"{len(alert_exprs)} expressions")
    print(f"referenced metrics ({len(found)}):")
    width = max((len(n) for n in found), default=0)
    for base in sorted(found):
        mtype = METRICS.get(base, ("?",))[0]
        if mtype == "?" and base in scrape_types:
            mtype = scrape_types[base]
        series = sorted(s for s in found[base]["suffixes"] if s)
        kind = mtype + (f" ({', '.join(series)})" if series else "")
        users = sorted(found[base]["where"])
        dash_n = sum(1 for u in users if u.startswith("dashboard"))
        alert_names = [u[len("alert "):] for u in users if u.startswith("alert ")]
        used = []
        if dash_n:
            used.append(f"dashboard: {dash_n} panel(s)/variable(s)")
        if alert_names:
            used.append("alerts: " + ", ".join(alert_names))
        print(f"  {base:<{width}}  {kind:<34}  {'; '.join(used)}")
    unused = sorted(set(METRICS) - set(found))
    if unused:
        print("exporter metrics not referenced: " + ", ".join(unused))

    if args.scrape:
        n_missing = check_scrape(args.scrape, found, rep)
        print(f"scrape {args.scrape}: {len(found) - n_missing} of {len(found)} referenced "
              f"metrics present")
    for n in rep.notes:
        print(f"note: {n}")
    if rep.failures:
        print(f"FAILED: {len(rep.failures)} problem(s):", file=sys.stderr)
        for f in rep.failures:
            print(f"  - {f}", file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
