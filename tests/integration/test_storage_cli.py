"""`specagent-ray results ls/show/compare` and `bench tau2 --store`, against a local folder and a real S3 server."""

import dataclasses
import json
import re
import uuid

import pytest

from specagent_ray.results.summaries import MethodSummary, write_json
from specagent_ray.cli import main
from specagent_ray.storage import S3Store, get_json, open_store, put_json
from specagent_ray.storage.testing import LocalS3, free_port, isolated_aws_env


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with isolated_aws_env(tmp_path_factory.mktemp("aws")), LocalS3() as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def store_uri(request, tmp_path):
    if request.param == "local":
        return (tmp_path / "results").as_uri()
    server = request.getfixturevalue("s3")
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    S3Store(bucket, endpoint_url=server.endpoint).client.create_bucket(Bucket=bucket)
    return f"s3://{bucket}/team-a?endpoint={server.endpoint}"


def summary(method: str, pass_at_1: float, hbm_tb: float, flops: float, decode: float,
            weak_hbm_tb: float = 0.0) -> MethodSummary:
    """``hbm_tb`` is the strong model's; the all-role total adds the drafter's ``weak_hbm_tb``."""
    total = hbm_tb + weak_hbm_tb
    return MethodSummary(
        method=method, trajectories=4, pass_at_1=pass_at_1, diff_vs_strong=0.0, ci_low=-1.0, ci_high=1.0,
        gap_recovered=float("nan"), strong_calls=3.0, strong_decode_tokens=decode, strong_prefill_tokens=5000.0,
        weak_tokens=0.0, committed_steps=10.0, strong_hbm_tb=hbm_tb, strong_hbm_low_tb=hbm_tb * 0.9,
        strong_hbm_high_tb=hbm_tb * 1.1, flops=flops, gpu_latency_s=1.0, wall_ms=2.0, total_hbm_tb=total,
        total_hbm_low_tb=total * 0.9, total_hbm_high_tb=total * 1.1, weak_hbm_tb=weak_hbm_tb, mid_hbm_tb=0.0)


META = {"domain": "airline", "trials": 2, "k": 6, "methods": ["strong", "specagent"], "review_messages": False,
        "seed": 0, "hardware": {"strong_model": "qwen3.5-397b-a17b", "weak_model": "qwen3-4b", "gpu": "h20",
                                "strong_gpus": 16, "weak_gpus": 1}, "command": "test"}


def bench_doc(tmp_path, name: str, specagent: MethodSummary) -> bytes:
    path = tmp_path / name
    write_json(path, [], [summary("strong", 86.0, 40.0, 1.0e15, 2800.0), specagent], [], META)
    return path.read_bytes()


@pytest.fixture
def two_runs(store_uri, tmp_path):
    store = open_store(store_uri)
    store.put("tau2/a.json", bench_doc(tmp_path, "a.json", summary("specagent", 86.0, 20.0, 1.3e15, 600.0, 10.0)))
    store.put("tau2/b.json", bench_doc(tmp_path, "b.json", summary("specagent", 84.0, 10.0, 1.95e15, 300.0, 14.0)))
    store.put("notes/readme.txt", b"not a result")
    return store_uri


def run(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out


def row(out: str, method: str, nth: int = 0) -> list[str]:
    """The cells of the ``nth`` row (over every table printed) whose first cell is ``method``."""
    lines = [x for x in out.splitlines() if x.startswith(f"│ {method} ")]
    return [cell.strip() for cell in lines[nth].strip("│ ").split("│")]


def compared(out: str, method: str) -> dict[str, list[str]]:
    """``results compare``'s rows of ``method``: figure -> [A, B, B/A]."""
    rows = [x for x in out.splitlines() if x.startswith(f"│ {method} ")]
    return {r[1]: r[2:] for r in ([c.strip() for c in x.strip("│ ").split("│")] for x in rows)}


def test_ls_lists_sorted_keys_and_filters_by_prefix(two_runs, capsys):
    assert run(capsys, "results", "ls", "--store", two_runs) == (0, "notes/readme.txt\ntau2/a.json\ntau2/b.json\n")
    assert run(capsys, "results", "ls", "--store", two_runs, "--prefix", "tau2/") == (0, "tau2/a.json\ntau2/b.json\n")
    rc, out = run(capsys, "results", "ls", "--store", two_runs, "--prefix", "none/")
    assert rc == 0 and out.startswith("no keys starting with 'none/'")


def test_show_prints_the_summary_tables(two_runs, capsys):
    rc, out = run(capsys, "results", "show", "tau2/b.json", "--store", two_runs)
    assert rc == 0
    assert "tau2 airline: quality, 2 tasks x 2 trial(s), K=6" in out and "policies=simulated" in out
    assert row(out, "specagent")[:2] == ["specagent", "84.0"]
    assert "16xh20" in out
    # the HBM table's headline counts every role: (10 strong + 14 drafter) TB against Strong-only's 40
    assert row(out, "specagent", 1)[1:] == ["24.00", "21.60-26.40", "0.60", "14.00", "0.00", "10.00", "0.25"]
    assert "x strong-only, all roles" in out and "(strong model only)" in out


def test_compare_gives_ratios_b_over_a(two_runs, capsys):
    rc, out = run(capsys, "results", "compare", "tau2/a.json", "tau2/b.json", "--store", two_runs)
    assert rc == 0 and "A: tau2/a.json" in out and "B: tau2/b.json" in out
    # one row per figure: A, B, B/A; HBM of every role first, the strong model's own labelled so
    assert compared(out, "specagent") == {
        "Pass@1 %": ["86.0", "84.0", "0.98"], "HBM TB, all roles": ["30.00", "24.00", "0.80"],
        "strong HBM TB (strong model only)": ["20.00", "10.00", "0.50"],
        "FLOPs, all roles": ["1.3e+15", "1.95e+15", "1.50"],
        "strong decode tok (strong model only)": ["600", "300", "0.50"]}
    assert [r[2] for r in compared(out, "strong").values()] == ["1.00"] * 5


def test_results_written_before_the_totals_still_show_and_compare(two_runs, tmp_path, capsys):
    store = open_store(two_runs)
    doc = json.loads(bench_doc(tmp_path, "old.json", summary("specagent", 80.0, 20.0, 1.3e15, 600.0, 10.0)))
    new_fields = {"total_hbm_tb", "total_hbm_low_tb", "total_hbm_high_tb", "weak_hbm_tb", "mid_hbm_tb"}
    doc["summary"] = [{k: v for k, v in s.items() if k not in new_fields} for s in doc["summary"]]
    put_json(store, "tau2/old.json", doc)
    rc, out = run(capsys, "results", "show", "tau2/old.json", "--store", two_runs)
    assert rc == 0 and row(out, "specagent", 1)[1:] == ["n/a", "n/a", "n/a", "n/a", "n/a", "20.00", "0.50"]
    rc, out = run(capsys, "results", "compare", "tau2/old.json", "tau2/b.json", "--store", two_runs)
    assert rc == 0 and compared(out, "specagent")["HBM TB, all roles"] == ["n/a", "24.00", "n/a"]
    assert compared(out, "specagent")["strong HBM TB (strong model only)"] == ["20.00", "10.00", "0.50"]


@pytest.mark.parametrize("argv, message", [
    (["show", "tau2/none.json"], "error: no object 'tau2/none.json' in "),
    (["show", "notes/readme.txt"], "error: 'notes/readme.txt' in .* is not valid JSON"),
    (["show", "tau2/shape.json"], "error: 'tau2/shape.json' in .* is not a `bench tau2` result"),
    (["compare", "tau2/a.json", "tau2/none.json"], "error: no object 'tau2/none.json'"),
    (["show", "../escape.json"], "error: invalid key '../escape.json'"),
])
def test_errors_are_one_line_and_exit_2(two_runs, capsys, argv, message):
    put_json(open_store(two_runs), "tau2/shape.json", {"meta": {}, "summary": [{"method": "x"}]})
    rc, out = run(capsys, "results", *argv, "--store", two_runs)
    assert rc == 2
    assert out.count("\n") == 1
    assert re.match(message, out)


def test_unreachable_endpoint_and_unknown_scheme_exit_2(capsys):
    dead = f"s3://bench-results?endpoint=http://127.0.0.1:{free_port()}&max_attempts=1"
    rc, out = run(capsys, "results", "ls", "--store", dead)
    assert rc == 2 and out.count("\n") == 1
    assert out.startswith("error: cannot list s3://bench-results/*") and "Could not connect" in out
    rc, out = run(capsys, "results", "ls", "--store", "ftp://host/x")
    assert rc == 2 and "unsupported store URI" in out and "s3://bucket" in out


def test_default_store_is_results_in_the_working_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "tau2-airline-seed0.json").write_bytes(
        bench_doc(tmp_path, "x.json", summary("specagent", 86.0, 20.0, 1.3e15, 600.0)))
    assert run(capsys, "results", "ls") == (0, "tau2-airline-seed0.json\n")
    rc, out = run(capsys, "results", "show", "tau2-airline-seed0.json")
    assert rc == 0 and row(out, "specagent")[1] == "86.0"


def test_bench_tau2_store_puts_json_and_png(store_uri, tmp_path, capsys):
    rc, out = run(capsys, "bench", "tau2", "--tasks", "1", "--trials", "1", "--workers", "1",
                  "--methods", "strong,specagent", "--out", str(tmp_path / "out"), "--store", store_uri)
    assert rc == 0 and "stored tau2-airline-seed0.json" in out
    store = open_store(store_uri)
    # the same keys as the --out folder, so the default store lists each run once
    assert store.list("tau2-airline") == ["tau2-airline-seed0.json", "tau2-airline-seed0.png"]
    assert store.get("tau2-airline-seed0.json") == (tmp_path / "out" / "tau2-airline-seed0.json").read_bytes()
    assert store.get("tau2-airline-seed0.png")[:8] == b"\x89PNG\r\n\x1a\n"
    doc = get_json(store, "tau2-airline-seed0.json")
    assert {s["method"] for s in doc["summary"]} == {"strong", "specagent"}
    assert sorted(open_store(str(tmp_path / "out")).list()) == ["tau2-airline-seed0.json", "tau2-airline-seed0.png"]
    rc, out = run(capsys, "results", "show", "tau2-airline-seed0.json", "--store", store_uri)
    assert rc == 0 and row(out, "specagent")[0] == "specagent"


def test_bench_tau2_with_an_unreachable_store_fails_before_the_run(tmp_path, capsys):
    dead = f"s3://bench-results?endpoint=http://127.0.0.1:{free_port()}&max_attempts=1"
    rc, out = run(capsys, "bench", "tau2", "--tasks", "1", "--trials", "1", "--workers", "1",
                  "--out", str(tmp_path / "out"), "--store", dead)
    assert rc == 2 and "Could not connect" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["results", "--help"], ["results", "compare", "--help"]])
def test_help_teaches_with_examples(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr().out
    assert info.value.code == 0
    assert "specagent-ray results compare" in out and "s3://bucket[/prefix][?endpoint=URL" in out


def test_summary_fields_match_the_writer():
    # `results show` rebuilds MethodSummary from stored dicts; this pins the shape it relies on
    assert {f.name for f in dataclasses.fields(MethodSummary)} == set(json.loads(json.dumps(
        dataclasses.asdict(summary("x", 1, 1, 1, 1)))))
