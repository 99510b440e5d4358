#!/usr/bin/env python3
"""diskvec's database layer (diskvec.open / Collection) through the protocol in common.py.

Variants: `sync` (durability="sync": upsert returns once its log record is on stable storage)
and `interval` (durability="interval", interval_ms=200: a background flush every 200 ms).
Collection: cosine, seal_threshold=20000 (default), DiskANN build defaults (max_degree 64,
build_list 100, pq_bytes chosen from dim); payload indexes on pos, lexname (keyword) and
chars (integer) created before the first write. Fully indexed = optimize(wait=True) (every
point sealed into on-disk DiskANN segments). Knob: search_list (L).
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Driver, main  # noqa: E402

import diskvec  # noqa: E402


class DiskVec(Driver):
    name = "diskvec"
    default_variant = "sync"
    knobs = [30, 50, 100, 200, 300]
    filter_knobs = [100, 200]
    mem_knob = 100
    durability = ("sync: upsert() returns once the batch's log record is on stable storage (fdatasync, group "
                  "commit); interval: a background flush every interval_ms, a crash may lose the last "
                  "interval's acknowledged writes")

    def knobs_for(self, k):
        return [100, 150, 200, 300] if k == 100 else self.knobs

    def config(self):
        return {"durability": self.variant, "interval_ms": 200 if self.variant == "interval" else None,
                "seal_threshold": 20000, "metric": "cosine", "payload_indexes": {"pos": "keyword", "lexname": "keyword",
                                                                                 "chars": "integer"},
                "knob": "search_list"}

    def versions(self):
        from importlib.metadata import version
        out = {"diskvec": version("diskvec"), "numpy": version("numpy")}
        commit = Path(diskvec.__file__).parent / "COMMIT"
        src = Path(sys.prefix) / "COMMIT"
        for p in (commit, src):
            if p.exists():
                out["commit"] = p.read_text().strip()
        return out

    def create(self, dim):
        self.db = diskvec.open(str(self.path))
        kw = {"durability": self.variant}
        if self.variant == "interval":
            kw["interval_ms"] = 200
        self.col = self.db.create_collection("c", dim=dim, metric="cosine", seal_threshold=20000, **kw)
        if self.cols is None:  # no payloads in the dataset: no payload indexes
            return
        self.col.create_payload_index("pos", "keyword")
        self.col.create_payload_index("lexname", "keyword")
        self.col.create_payload_index("chars", "integer")

    def write_prep(self, lo, hi):
        c = self.cols
        if c is None:
            return list(range(lo, hi)), self.train[lo:hi], None
        payloads = [{"pos": c["pos"][i], "lexname": c["lexname"][i], "synset": c["synset"][i],
                     "chars": c["chars"][i], "text": c["text"][i]} for i in range(lo, hi)]
        return list(range(lo, hi)), self.train[lo:hi], payloads

    def write(self, batch):
        ids, vectors, payloads = batch
        self.col.upsert(ids, vectors, payloads)

    def wait_indexed(self):
        self.col.optimize(wait=True)

    def open(self):
        # DV_SEARCH_MEMORY: the database's search memory for this run (default: auto), to
        # measure how QPS follows it; DV_PQ_CODES: which PQ codes (default: auto).
        self.db = diskvec.open(str(self.path), search_memory=os.environ.get("DV_SEARCH_MEMORY"),
                               pq_codes=os.environ.get("DV_PQ_CODES"))
        self.col = self.db.collection("c")

    def info(self):
        i = self.col.info()
        segs = i.get("segments") or []
        dram = None
        if isinstance(segs, list):
            vals = [s.get("dram_bytes") for s in segs if isinstance(s, dict) and s.get("dram_bytes") is not None]
            dram = sum(vals) if vals else None
        i["index_dram_bytes"] = dram
        try:
            i["recovery"] = self.col.recovery()
        except Exception as e:  # noqa: BLE001
            i["recovery_error"] = repr(e)
        return i

    def close(self):
        if getattr(self, "db", None) is not None:
            self.db.close()
            self.db = None
            self.col = None

    def batch_searcher(self, k, knob):
        col = self.col

        def run(qs):
            return [[h["id"] for h in hits] for hits in
                    col.search_batch(qs, k=k, search_list=knob, with_payload=False, threads=2)]
        return run

    def searcher(self, k, knob, filt=None):
        import common
        col = self.col
        qf = None if filt is None else common.qdrant_json(filt)

        def search(v):
            return [h["id"] for h in col.search(v, k=k, filter=qf, search_list=knob, with_payload=False)]
        return search


if __name__ == "__main__":
    main(DiskVec)
