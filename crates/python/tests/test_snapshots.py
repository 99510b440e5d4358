"""Snapshots from Python: a collection packed at one operation, restored on another database
with every point, vector and payload, and a mismatched checksum refused."""
import hashlib

import numpy as np
import pytest

import diskvec


def test_a_snapshot_restores_on_another_database(tmp_path):
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(300, 8)).astype(np.float32)
    payloads = [{"i": i, "even": i % 2 == 0} for i in range(300)]
    with diskvec.open(tmp_path / "a") as a:
        col = a.create_collection("c", dim=8, metric="l2")
        col.upsert(range(300), vectors, payloads)
        snap = a.create_snapshot("c")
        assert a.list_snapshots("c") == [
            {"name": snap["name"], "size": snap["size"], "checksum": snap["checksum"]}]
        with open(snap["path"], "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == snap["checksum"]
        want = col.search(vectors[7], k=5)
        with diskvec.open(tmp_path / "b") as b:
            with pytest.raises(ValueError, match="checksum"):
                b.restore_snapshot("copy", snap["path"], checksum="0" * 64)
            assert "copy" not in b
            copy = b.restore_snapshot("copy", snap["path"], checksum=snap["checksum"])
            assert len(copy) == 300
            got = copy.search(vectors[7], k=5)
            assert [h["id"] for h in got] == [h["id"] for h in want]
            assert [h["payload"] for h in got] == [h["payload"] for h in want]
        a.delete_snapshot("c", snap["name"])
        assert a.list_snapshots("c") == []
        with pytest.raises(KeyError):
            a.delete_snapshot("c", snap["name"])
