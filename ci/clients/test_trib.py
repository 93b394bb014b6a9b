"""The `trib` CLI against a real broker, cross-checked with kcat."""

import json
import os
import subprocess

import pytest

from security_mode import bench_args

TRIB = os.environ.get("TRIB_BIN", os.path.join(os.path.dirname(os.environ.get("TRIBUTARY_BIN", "target/release/tributary")), "trib"))


def trib(broker, *args, stdin=None, check=True):
    r = subprocess.run([TRIB, "--bootstrap", broker.bootstrap, *args], input=stdin, capture_output=True, text=True, timeout=60)
    if check:
        assert r.returncode == 0, f"trib {' '.join(args)} failed: {r.stderr}"
    return r


def kcat(*args, stdin=None):
    r = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_topics_produce_consume_and_groups(broker):
    trib(broker, "topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=60000")
    assert trib(broker, "topics", "list").stdout.split() == ["orders"]
    # Kafka creates __consumer_offsets when a client first needs a group coordinator.
    assert "__consumer_offsets" not in trib(broker, "topics", "list", "--internal").stdout.split()
    assert 'topic "orders" with 3 partitions' in kcat("-b", broker.bootstrap, "-L", "-t", "orders")

    trib(broker, "produce", "orders", "--key-separator", ":", "--header", "src=trib", "--partition", "1", stdin="k1:hello\nk2:world\n")
    out = kcat("-b", broker.bootstrap, "-C", "-t", "orders", "-p", "1", "-o", "beginning", "-e", "-f", "%k=%s %h\n")
    assert out.splitlines() == ["k1=hello src=trib", "k2=world src=trib"]

    kcat("-b", broker.bootstrap, "-P", "-t", "orders", "-p", "2", stdin="from-kcat\n")
    lines = trib(broker, "consume", "orders", "--from-beginning", "--max-messages", "3", "--format", "json").stdout.splitlines()
    msgs = sorted((json.loads(l)["partition"], json.loads(l)["offset"], json.loads(l)["value"]) for l in lines)
    assert msgs == [(1, 0, "hello"), (1, 1, "world"), (2, 0, "from-kcat")]
    assert trib(broker, "consume", "orders", "--partition", "1", "--offset", "1", "--max-messages", "1").stdout == "world\n"

    desc = trib(broker, "topics", "describe", "orders").stdout
    assert "Partition: 1" in desc and "LogEndOffset: 2" in desc and "retention.ms=60000" in desc
    trib(broker, "topics", "alter-config", "orders", "--set", "segment.bytes=1048576")
    desc = trib(broker, "topics", "describe", "orders").stdout
    assert "segment.bytes=1048576" in desc and "retention.ms=60000" in desc, "other overrides are kept"

    # A group reads everything, commits; lag is zero; reset moves it back.
    assert len(trib(broker, "consume", "orders", "--group", "g", "--from-beginning", "--max-messages", "3").stdout.splitlines()) == 3
    assert "__consumer_offsets" in trib(broker, "topics", "list", "--internal").stdout.split()
    assert "g\tEmpty" in trib(broker, "groups", "list").stdout
    desc = trib(broker, "groups", "describe", "g").stdout
    assert "orders\t1\t2\t2\t0" in desc
    trib(broker, "groups", "reset-offsets", "g", "--topic", "orders", "--to-earliest")
    assert "orders\t1\t0\t2\t2" in trib(broker, "groups", "describe", "g").stdout
    trib(broker, "groups", "delete", "g")
    assert "g\t" not in trib(broker, "groups", "list").stdout

    trib(broker, "topics", "delete", "orders")
    assert trib(broker, "topics", "list").stdout.strip() == ""


def test_cluster_info(broker):
    info = trib(broker, "cluster", "info").stdout
    assert "Broker 0 at 127.0.0.1" in info and "Controller: 0" in info and "Produce" in info and "v3-v10" in info


def test_errors_are_one_line_with_a_cause(broker):
    r = trib(broker, "topics", "describe", "missing", check=False)
    assert r.returncode != 0 and r.stderr.startswith("trib: ")
    r = trib(broker, "topics", "create", "dup", check=False)
    r = trib(broker, "topics", "create", "dup", check=False)
    assert r.returncode != 0 and "already exists" in r.stderr.lower()
    r = subprocess.run([TRIB, "--bootstrap", "127.0.0.1:1", "--timeout-ms", "2000", "topics", "list"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "cannot reach the broker" in r.stderr


BENCH = os.path.join(os.path.dirname(TRIB), "tributary-bench")


def test_bench_modes_report_and_compare(broker, tmp_path):
    def bench(mode, *args):
        r = subprocess.run([BENCH, mode, *bench_args(mode), *args], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r
    common = ["--bootstrap", broker.bootstrap, "--topic", "b", "--partitions", "4", "--message-size", "512"]
    r = bench("produce", *common, "--messages", "20000", "--json", "--report", str(tmp_path / "rep"))
    produced = json.loads(r.stdout.splitlines()[-1])
    assert produced["mode"] == "produce" and produced["msgs"] == 20000 and produced["latency_us"]["p99"] > 0
    for f in ["summary.json", "latency.hgrm", "latency.svg", "throughput.svg"]:
        assert (tmp_path / "rep" / f).stat().st_size > 0
    consumed = json.loads(bench("consume", *common, "--consumers", "2", "--json").stdout.splitlines()[-1])
    assert consumed["msgs"] == 20000
    r = bench("e2e", "--bootstrap", broker.bootstrap, "--topic", "e", "--partitions", "2", "--rate", "2000", "--duration", "2", "--json")
    assert "msgs/s" in r.stderr, "a progress line each second, on stderr"
    e2e = json.loads(r.stdout.splitlines()[-1])
    assert e2e["msgs"] >= 3000 and e2e["latency_us"]["p50"] > 0
    (tmp_path / "a.json").write_text(json.dumps(produced))
    (tmp_path / "b.json").write_text(json.dumps(e2e))
    out = bench("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--report", str(tmp_path / "cmp")).stdout
    assert "msgs_per_sec" in out and "B/A" in out
    assert (tmp_path / "cmp" / "compare-latency.svg").exists()
    machine = json.loads(bench("machine", "--dir", str(tmp_path / "m"), "--size-mb", "16").stdout.splitlines()[-1])
    assert machine["odirect_write_mb_per_sec"] > 0 and machine["loopback_tcp_mb_per_sec"] > 0


def test_bench_refuses_bad_input_with_a_cause(broker, tmp_path):
    def bench(mode, *args):
        return subprocess.run([BENCH, mode, *bench_args(mode), *args], capture_output=True, text=True, timeout=120)
    r = bench("consume", "--bootstrap", broker.bootstrap, "--topic", "nothing-here", "--partitions", "1")
    assert r.returncode != 0 and r.stderr.strip().splitlines()[-1].startswith("tributary-bench: ")
    (tmp_path / "junk.json").write_text("not json")
    r = bench("compare", str(tmp_path / "junk.json"), str(tmp_path / "junk.json"))
    assert r.returncode != 0 and "not a tributary-bench JSON summary" in r.stderr
