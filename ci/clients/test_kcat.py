"""kcat from the distribution (built on an older librdkafka) lists metadata, produces, consumes."""

import subprocess


def kcat(*args, stdin=None):
    return subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_kcat_metadata_produce_consume(broker):
    r = kcat("-b", broker.bootstrap, "-P", "-t", "kc", stdin="one\ntwo\nthree\n")
    assert r.returncode == 0, r.stderr
    r = kcat("-b", broker.bootstrap, "-L")
    assert r.returncode == 0, r.stderr
    assert 'topic "kc" with 1 partitions' in r.stdout
    assert "broker 0 at 127.0.0.1" in r.stdout
    r = kcat("-b", broker.bootstrap, "-C", "-t", "kc", "-o", "beginning", "-e", "-f", "%o:%s\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0:one", "1:two", "2:three"]
    r = kcat("-b", broker.bootstrap, "-L", "-J")
    assert r.returncode == 0 and '"kc"' in r.stdout
