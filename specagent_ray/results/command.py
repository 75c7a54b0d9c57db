"""``specagent-ray results``: list, show and compare stored ``bench tau2`` results (a local folder or S3)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rich.console import Console
from rich.markup import escape

from .tables import compare_table, summary_tables, theory_table

RESULTS_EPILOG = """examples:
  specagent-ray results ls                                   # ./results, the folder `bench tau2` writes
  specagent-ray results ls --store s3://bench-results/team-a --prefix tau2-airline
  specagent-ray results show tau2-airline-seed0.json
  specagent-ray results compare tau2-airline-seed0.json tau2-airline-seed1.json \\
      --store "s3://bench-results/team-a?endpoint=http://127.0.0.1:9000&region=us-east-1"

Stores: a plain path, file:///abs/path, or s3://bucket[/prefix][?endpoint=URL&region=NAME&max_attempts=N].
S3 credentials come from boto3's usual chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws, a role).
KEY is the path inside the store, as `results ls` prints it. Compare prints ratios B/A."""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``results`` command and its ``ls``, ``show`` and ``compare`` actions."""
    r = sub.add_parser("results", help="list, show and compare stored bench results (local folder or S3)",
                       description="Bench results in a store: a local folder (default ./results) or S3.",
                       epilog=RESULTS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = r.add_subparsers(dest="action", required=True)
    store_help = "store URI (default: file://$PWD/results)"
    ls = actions.add_parser("ls", help="list the keys in a store", epilog=RESULTS_EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    ls.add_argument("--store", default=None, metavar="URI", help=store_help)
    ls.add_argument("--prefix", default="", help="only keys starting with this, e.g. tau2-airline")
    show = actions.add_parser("show", help="the summary tables of one `bench tau2` result",
                              epilog=RESULTS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("key", metavar="KEY")
    show.add_argument("--store", default=None, metavar="URI", help=store_help)
    cmp_ = actions.add_parser("compare", help="two `bench tau2` results per method, with ratios B/A",
                              epilog=RESULTS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmp_.add_argument("key_a", metavar="KEY_A")
    cmp_.add_argument("key_b", metavar="KEY_B")
    cmp_.add_argument("--store", default=None, metavar="URI", help=store_help)
    r.set_defaults(run=run_results)
    return r


def open_results_store(uri: str | None):
    """The store at ``uri``, or the ./results folder that ``bench tau2`` writes by default."""
    from ..storage import open_store

    return open_store(uri if uri is not None else (Path.cwd() / "results").as_uri())


def run_results(args: argparse.Namespace, console: Console) -> int:
    store = open_results_store(args.store)
    if args.action == "ls":
        keys = store.list(args.prefix)
        for key in keys:
            console.print(escape(key), soft_wrap=True, highlight=False)
        if not keys:
            console.print(f"no keys{f' starting with {args.prefix!r}' if args.prefix else ''} in {store}",
                          soft_wrap=True)
        return 0
    if args.action == "show":
        doc = _load_bench(store, args.key)
        console.print(f"{escape(args.key)} in {escape(str(store))}: {_describe(doc.cfg)}", soft_wrap=True,
                      highlight=False)
        console.print("labels: " + ", ".join(f"{k}={v}" for k, v in doc.labels.items()), soft_wrap=True)
        for table in summary_tables(doc.summary, doc.cfg, doc.labels.get("policies") == "live engines"):
            console.print(table)
        if doc.theory:
            console.print(theory_table(doc.theory))
        return 0
    a, b = _load_bench(store, args.key_a), _load_bench(store, args.key_b)
    for tag, key, doc in (("A", args.key_a, a), ("B", args.key_b, b)):
        console.print(f"{tag}: {escape(key)} ({_describe(doc.cfg)})", soft_wrap=True, highlight=False)
    if a.cfg.domain != b.cfg.domain:
        console.print(f"note: A and B are different domains ({a.cfg.domain} vs {b.cfg.domain})")
    console.print(compare_table(a.summary, b.summary))
    return 0


def _load_bench(store, key: str) -> SimpleNamespace:
    """A `bench tau2` JSON (see results.summaries.write_json) as summaries plus the run's settings."""
    from ..storage import get_json
    from .summaries import MethodSummary, TheoryCheck

    doc = get_json(store, key)
    try:
        meta, hw = doc["meta"], doc["meta"]["hardware"]
        cfg = SimpleNamespace(domain=meta["domain"], trials=int(meta["trials"]), seed=meta.get("seed", "?"),
                              spec=SimpleNamespace(k=meta["k"]),
                              hardware=SimpleNamespace(gpu=hw["gpu"], strong_gpus=hw["strong_gpus"]))
        summary = [MethodSummary(**s) for s in doc["summary"]]
        theory = [TheoryCheck(**t) for t in doc.get("theory", [])]
        labels = dict(doc.get("labels", {}))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{key!r} in {store} is not a `bench tau2` result "
                         f"(keys labels/meta/summary/theory/results): {type(exc).__name__}: {exc}") from None
    if not summary or cfg.trials < 1:
        raise ValueError(f"{key!r} in {store} is not a `bench tau2` result: empty summary or trials < 1")
    return SimpleNamespace(cfg=cfg, summary=summary, theory=theory, labels=labels)


def _describe(cfg: SimpleNamespace) -> str:
    return (f"{cfg.domain}, {cfg.trials} trial(s), K={cfg.spec.k}, seed {cfg.seed}, "
            f"strong on {cfg.hardware.strong_gpus}x{cfg.hardware.gpu}")
