#!/usr/bin/env python3
"""qdrant-edge-py (Qdrant's engine in-process: WAL, segments, HNSW, payload indexes) through
the protocol in common.py. Variants: `mem` (vectors in RAM: on_disk=False) and `disk` (vectors
on disk, mmap: on_disk=True) and `diskhnsw` (vectors on disk and the HNSW graph on disk:
HnswIndexConfig(on_disk=True)). All: HNSW m=16, ef_construct=100 (Qdrant's defaults),
full_scan_threshold=10000 KB (default), graph in RAM (default), payload on disk (edge default),
WAL on (default), payload indexes on pos, lexname (keyword) and chars (integer) declared before
the first write (so the HNSW build adds Qdrant's payload-aware links). Knob: hnsw_ef.

    .venvs/qdrant/bin/python run_qdrant_edge.py --phase load --variant mem --dataset wordnet-minilm384-50k --out X.json
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import Driver, main  # noqa: E402

import qdrant_edge as qe  # noqa: E402


class QdrantEdge(Driver):
    name = "qdrant-edge"
    default_variant = "mem"
    knobs = [32, 64, 128, 256]

    def knobs_for(self, k):
        return [100, 128, 256, 512] if k == 100 else self.knobs
    filter_knobs = [64, 128]
    mem_knob = 128
    durability = ("update() returns once the operation is in the WAL and applied to the segments; the WAL "
                  "is an mmap'd file that is not fsync'd/msync'd per update (strace: see durability JSON), "
                  "so an acknowledged write survives a process crash but not a power loss until the next "
                  "flush (flush() or close()); wal_enabled=None (on), the default")

    def config(self):
        return {"vectors_on_disk": self.variant in ("disk", "diskhnsw"), "hnsw_on_disk": self.variant == "diskhnsw", "hnsw_m": 16, "hnsw_ef_construct": 100,
                "full_scan_threshold_kb": 10000, "payload_indexes": {"pos": "keyword", "lexname": "keyword",
                                                                     "chars": "integer"},
                "distance": "Cosine", "knob": "hnsw_ef"}

    def versions(self):
        from importlib.metadata import version
        return {"qdrant-edge-py": version("qdrant-edge-py"), "numpy": version("numpy")}

    def edge_config(self, dim):
        return qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine,
                                        on_disk=self.variant in ("disk", "diskhnsw")),
            hnsw_config=qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=10000,
                                           on_disk=True if self.variant == "diskhnsw" else None))

    def create(self, dim):
        self.shard = qe.EdgeShard.create(str(self.path), self.edge_config(dim))
        if self.cols is None:  # no payloads in the dataset: no payload indexes
            return
        self.shard.update(qe.UpdateOperation.create_field_index("pos", qe.PayloadSchemaType.Keyword))
        self.shard.update(qe.UpdateOperation.create_field_index("lexname", qe.PayloadSchemaType.Keyword))
        self.shard.update(qe.UpdateOperation.create_field_index("chars", qe.PayloadSchemaType.Integer))

    def write_prep(self, lo, hi):
        c = self.cols
        if c is None:
            return [qe.Point(i, self.train[i].tolist(), None) for i in range(lo, hi)]
        return [qe.Point(i, self.train[i].tolist(), {"pos": c["pos"][i], "lexname": c["lexname"][i],
                                                     "synset": c["synset"][i], "chars": c["chars"][i],
                                                     "text": c["text"][i]})
                for i in range(lo, hi)]

    def write(self, points):
        self.shard.update(qe.UpdateOperation.upsert_points(points))

    def wait_indexed(self):
        # Edge has no background optimizer: optimize() runs the optimizers (HNSW build, segment
        # merge) in-process until none is planned.
        self.optimized = self.shard.optimize()

    def open(self):
        self.shard = qe.EdgeShard.load(str(self.path))

    def info(self):
        i = self.shard.info()
        return {"segments": i.segments_count, "points": i.points_count, "indexed_vectors": i.indexed_vectors_count,
                "payload_indexes": {k: v.points for k, v in i.payload_schema.items()}}

    def close(self):
        if getattr(self, "shard", None) is not None:
            self.shard.close()
            self.shard = None

    @staticmethod
    def to_filter(f):
        if f is None:
            return None
        if f["kind"] == "eq":
            cond = qe.FieldCondition(key=f["field"], match=qe.MatchValue(f["value"]))
        elif f["kind"] == "any":
            cond = qe.FieldCondition(key=f["field"], match=qe.MatchAny(f["values"]))
        else:
            cond = qe.FieldCondition(key=f["field"], range=qe.RangeFloat(gte=f["lo"], lt=f["hi"]))
        return qe.Filter(must=[cond])

    def batch_searcher(self, k, knob):
        shard = self.shard
        params = qe.SearchParams(hnsw_ef=knob)

        def run(qs):
            reqs = [qe.QueryRequest(limit=k, query=qe.Query.Nearest(v.tolist()), params=params, with_payload=False,
                                    with_vector=False) for v in qs]
            return [[p.id for p in r] for r in shard.query_batch(qe.QueryBatchRequest(reqs))]
        return run

    def searcher(self, k, knob, filt=None):
        shard = self.shard
        params = qe.SearchParams(hnsw_ef=knob)
        qf = self.to_filter(filt)

        def search(v):
            req = qe.QueryRequest(limit=k, query=qe.Query.Nearest(v.tolist()), params=params, filter=qf,
                                  with_payload=False, with_vector=False)
            return [p.id for p in shard.query(req)]
        return search


if __name__ == "__main__":
    main(QdrantEdge)
