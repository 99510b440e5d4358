"""Lets VectorDBBench 2.0's Milvus client finish its optimize step against Milvus 2.3.5.

Loaded in every Python process of the venv (vdbb_run.sh puts a `.pth` file that imports it
into the venv's site-packages, so VectorDBBench's spawned workers get it too), and active only
when VDBB_MILVUS235_COMPAT=1, which vdbb_run.sh sets for the Milvus runs alone: the qdrantlocal
client, which runs against diskvec, is never touched.

Why: VectorDBBench 2.0 requires pymilvus>=2.6.15, and its `Milvus.optimize` was written for
Milvus 2.6 servers. Against 2.3.5 it never returns:
  1. `_wait_for_segments_sorted` loops until every segment of `list_persistent_segments` has
     `is_sorted=True`; 2.3.5's GetPersistentSegmentInfo has no such field (segment sorting is a
     2.5 feature), so pymilvus reads False for ever.
  2. `_force_merge` calls `compact(target_size=...)` and requires a plan covering every flushed
     segment; 2.3.5 ignores target_size, reports the compaction Completed with `plans: []`, and
     VectorDBBench retries 10 times, 30 s apart, then raises "force merge failed".
  3. `search_embedding` reads each hit's id as `hit[primary_field]` ("pk"); pymilvus 2.6
     against a 2.3.5 server names it "id" (2.3.5 does not return the primary field's name), so
     every search raised KeyError 'pk' and counted 0 results. The shim reads "pk", else "id".
With the shim the optimize step is what it is for a 2.3 server: flush, one ordinary compaction
(VectorDBBench still issues and waits for it), wait until the index has no pending rows,
refresh_load. Insert, index build parameters and the search request are VectorDBBench's own.
"""

import os

if os.environ.get("VDBB_MILVUS235_COMPAT") == "1":
    try:
        from vectordb_bench.backend.clients.milvus import milvus as _m

        def _no_sorted_segments(self):
            """Milvus 2.3.5 has no sorted segments: nothing to wait for."""

        def _plain_compaction_only(self, max_attempts: int = 0):
            """Milvus 2.3.5 has no force merge (target_size): the plain compaction
            VectorDBBench ran just before this call is the merge it gets."""

        _m.Milvus._wait_for_segments_sorted = _no_sorted_segments
        _m.Milvus._force_merge = _plain_compaction_only

        _search = _m.Milvus.search_embedding

        def _ids_named_id_or_pk(self, *args, **kwargs):
            """VectorDBBench's search; each hit's id read as "pk" or, from 2.3.5, "id"."""
            client = self.client

            class Hits:
                def search(self, **kw):
                    res = client.search(**kw)
                    return [[_Hit(h) for h in row] for row in res]

            self.client = Hits()
            try:
                return _search(self, *args, **kwargs)
            finally:
                self.client = client

        class _Hit(dict):
            def __missing__(self, key):
                return dict.__getitem__(self, "id")

        _m.Milvus.search_embedding = _ids_named_id_or_pk
    except Exception as e:  # never break an unrelated interpreter of the venv
        import sys

        print(f"vdbb_milvus_compat: not applied: {e!r}", file=sys.stderr)
