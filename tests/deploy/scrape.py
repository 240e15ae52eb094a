"""GET one path of a Stockade door (probes, metrics) and print what came back as JSON.

    target/deploy-venv/bin/python tests/deploy/scrape.py URL [--ca-file CA] [--token-file F]

Prints {"status": N, "body": "...", "samples": {...}}; for a 200 from /metrics the body is parsed
with prometheus-client's OpenMetrics parser (not ours) and every sample is listed as
`name{label=value,...}` -> value. Used by crates/stockade/tests/it/remote_ns.rs.
"""

import argparse
import json
import ssl
import urllib.error
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--ca-file")
    parser.add_argument("--token-file")
    args = parser.parse_args()
    context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
    request = urllib.request.Request(args.url)
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            request.add_header("Authorization", f"Bearer {f.read().strip()}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as resp:
            status, body, kind = resp.status, resp.read().decode(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, body, kind = e.code, e.read().decode(), ""
    samples = {}
    if status == 200 and "openmetrics" in kind:
        for family in text_string_to_metric_families(body):
            for s in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                samples[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    print(json.dumps({"status": status, "body": body, "samples": samples}))


if __name__ == "__main__":
    main()
