"""deploy/grafana/kvtier.json queries only what `kvtier serve` really exports.

    grafana_dashboard_check.py KVTIER_CLI DASHBOARD

Starts a real daemon (small tiers in a temporary folder, metrics on a free port), scrapes
/metrics, and checks every PromQL query of the dashboard (panel targets and template
variables) against that scrape:
- every metric name is an exported family, or a histogram family's _bucket/_sum/_count;
- rate()/irate()/increase() only over counters and histogram series, never gauges;
  histogram_quantile() over _bucket series;
- every label in a matcher, a by/without/on/ignoring list or a {{legend}} is a label of the
  query's metrics (or instance/job, which Prometheus adds, or le of a bucket);
- every function or aggregation is PromQL's;
- the panels the issue asks for are there: hit rate, bytes per tier, latency quantiles,
  predictor calibration, the mover queue.
The checker is first run on broken queries, which it must reject.
"""

import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon import Daemon, fail, scrape_families  # noqa: E402

FUNCTIONS = set("""abs absent absent_over_time avg avg_over_time bottomk ceil changes clamp clamp_max clamp_min count
count_over_time count_values day_of_month day_of_week day_of_year days_in_month delta deriv exp floor group
histogram_quantile holt_winters hour idelta increase irate label_join label_replace last_over_time ln log10 log2 max
max_over_time min min_over_time minute month predict_linear present_over_time quantile quantile_over_time rate resets
round scalar sgn sort sort_desc sqrt stddev stddev_over_time stdvar stdvar_over_time sum sum_over_time time timestamp
topk vector year""".split())
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on", "ignoring", "group_left",
            "group_right"}
RATE_FUNCTIONS = ("rate", "irate", "increase")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
IMPLICIT_LABELS = {"instance", "job"}
REQUIRED = {  # what issue 20 asks the dashboard to show, by the family that carries it
    "hit rate": "kvtier_lookup_blocks_total",
    "hits per tier": "kvtier_tier_hits_total",
    "bytes per tier": "kvtier_tier_used_bytes",
    "latency histogram": "kvtier_request_duration_seconds_bucket",
    "predictor calibration": "kvtier_predictor_reliability_observed_frequency",
    "predictor Brier score": "kvtier_predictor_brier_score_overall",
    "mover queue": "kvtier_mover_queue_depth",
}


class Exported:
    """The scrape: family -> type, and series name -> label names."""

    def __init__(self, text):
        self.families = scrape_families(text)
        self.labels = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s", line)
            if m:
                names = set(re.findall(r'(\w+)="', m.group(2) or ""))
                self.labels.setdefault(m.group(1), set()).update(names)

    def kind(self, name):
        """The type of the series `name` ('counter', 'gauge', 'histogram_bucket', ...) or None."""
        if name in self.families:
            return self.families[name]
        for suffix in HISTOGRAM_SUFFIXES:
            base = name[: -len(suffix)]
            if name.endswith(suffix) and self.families.get(base) == "histogram":
                return "histogram" + suffix
        return None


def balanced(expr, start):
    """The text inside the parenthesis opening at expr[start]."""
    depth = 0
    for i in range(start, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[i], 0)
        if depth == 0:
            return expr[start + 1 : i]
    raise ValueError("unbalanced parentheses")


def metric_names(expr):
    """(metric names, label names used in matchers and grouping, function names) of a query."""
    expr = re.sub(r"\$__\w+|\$\{?\w+\}?", "5m", expr)  # Grafana variables in ranges
    labels = set(re.findall(r'(\w+)\s*(?:=~|!~|!=|=)\s*"', expr))
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    bare = re.sub(r"\{[^}]*\}", " ", bare)
    bare = re.sub(r"\[[^\]]*\]", " ", bare)
    for group in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", bare):
        labels.update(x.strip() for x in group.split(",") if x.strip())
    bare = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    functions, metrics = set(), set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)(\s*\()?", bare):
        name = m.group(1)
        if m.group(2):
            functions.add(name)
        elif name not in KEYWORDS:
            metrics.add(name)
    return metrics, labels, functions


def check_query(expr, legend, exported):
    """A list of what is wrong with one query (empty: fine)."""
    problems = []
    try:
        metrics, labels, functions = metric_names(expr)
        for fn in RATE_FUNCTIONS + ("histogram_quantile",):
            for m in re.finditer(rf"\b{fn}\s*\(", expr):
                inner, _, _ = metric_names(balanced(expr, m.end() - 1))
                for name in inner:
                    kind = exported.kind(name) or ""
                    if fn in RATE_FUNCTIONS and not (kind == "counter" or kind.startswith("histogram_")):
                        problems.append(f"{fn}() over {name}, a {kind or 'missing series'}, not a counter")
                    if fn == "histogram_quantile" and kind != "histogram_bucket":
                        problems.append(f"histogram_quantile() over {name}, not a histogram's _bucket")
    except ValueError as e:
        return [str(e)]
    if not metrics:
        problems.append("names no metric")
    known_labels = set(IMPLICIT_LABELS)
    for name in sorted(metrics):
        kind = exported.kind(name)
        if kind is None:
            problems.append(f"{name} is not exported by kvtier serve")
            continue
        known_labels |= exported.labels.get(name, set())
    for fn in sorted(functions - FUNCTIONS):
        problems.append(f"{fn}() is not a PromQL function")
    legend_labels = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend or ""))
    for label in sorted((labels | legend_labels) - known_labels):
        problems.append(f"label {label!r} is on none of {sorted(metrics)}")
    return problems


def queries(dashboard):
    """(where, expr, legend) of every query: panel targets (rows' nested panels too) and
    template variables (label_values(metric, label) and query_result(expr))."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((f"panel {p.get('title')!r} {t.get('refId')}", t.get("expr", ""), t.get("legendFormat", "")))
            walk(p.get("panels", []))

    walk(dashboard.get("panels", []))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = re.fullmatch(r"\s*label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)\s*", q)
        if m:
            out.append((f"variable {v['name']}", m.group(1), "{{%s}}" % m.group(2)))
        else:
            m = re.fullmatch(r"\s*query_result\((.*)\)\s*", q)
            out.append((f"variable {v['name']}", m.group(1) if m else q, ""))
    return out


def self_test(exported):
    """The checker must reject each of these."""
    broken = {
        'rate(kvtier_no_such_family_total[5m])': "not exported",
        'rate(kvtier_mover_queue_depth[5m])': "not a counter",
        'histogram_quantile(0.9, sum by (le) (rate(kvtier_requests_total[5m])))': "_bucket",
        'sum by (tiers) (kvtier_tier_used_bytes)': "label 'tiers'",
        'sum(kvtier_tier_used_bytes{tire="x"})': "label 'tire'",
        'histogramquantile(0.9, kvtier_request_duration_seconds_bucket)': "not a PromQL function",
        'kvtier_request_duration_seconds_total': "not exported",
    }
    for expr, why in broken.items():
        problems = check_query(expr, "", exported)
        if not any(why in p for p in problems):
            fail(f"self-test: the checker did not reject {expr!r} ({why}); it said {problems}")
    if check_query("kvtier_tier_used_bytes", "{{kinds}}", exported) == []:
        fail("self-test: the checker accepted the legend label {{kinds}}")
    print(f"self-test: {len(broken) + 1} broken queries rejected")


def main():
    cli, dashboard_path = sys.argv[1:3]
    dashboard = json.load(open(dashboard_path))
    with tempfile.TemporaryDirectory(prefix="kvtier-grafana-") as tmp:
        config = os.path.join(tmp, "serve.yaml")
        with open(config, "w") as f:
            f.write(f"""data_dir: {tmp}/data
tiers:
  - kind: cpu_dram
    capacity: 32MiB
    lock_memory: false
  - kind: nvme
    name: disk
    files: [disk/slab.0]
    capacity: 32MiB
listen:
  metrics_port: 0
""")
        with Daemon([cli, "serve", "--config", config]) as d:
            status, text = d.get("/metrics")
    if status != 200:
        fail(f"/metrics answered {status}")
    exported = Exported(text)
    print(f"kvtier serve exports {len(exported.families)} families")
    if len(exported.families) < 20:
        fail("fewer than 20 families in the scrape: is this kvtier serve's /metrics?")
    self_test(exported)

    found = queries(dashboard)
    if len(found) < 20:
        fail(f"only {len(found)} queries in {dashboard_path}")
    errors, used = [], set()
    for where, expr, legend in found:
        for problem in check_query(expr, legend, exported):
            errors.append(f"{where}: {problem}\n    {expr}")
        used |= metric_names(expr)[0]
    for what, family in REQUIRED.items():
        if family not in used:
            errors.append(f"no panel shows the {what} ({family})")
    if errors:
        fail(f"{dashboard_path}:\n  " + "\n  ".join(errors))
    unused = sorted(f for f, k in exported.families.items()
                    if f not in used and not (k == "histogram" and f + "_bucket" in used))
    print(f"{len(found)} queries over {len(used)} series names: ok")
    print("families on no panel: " + (", ".join(unused) or "none"))


if __name__ == "__main__":
    main()
