#!/usr/bin/env python3
"""After an import_large.py run was killed (SIGKILL, the OOM killer): opens the database again
and checks that every point acknowledged before the kill is there: the exact count against
the last acknowledged number, 500 sampled ids fetched, and 50 of their vectors against the
dataset's rows (normalized for cosine, then rounded to float16 as stored).

  python check_import.py DB_DIR DATASET_DIR ACKNOWLEDGED
"""
import json
import sys
import time

import diskvec
import numpy as np
import pyarrow.parquet as pq

db_dir, dataset, acked = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = time.time()
db = diskvec.open(db_dir)
col = db.collection("c")
opened = time.time() - t
info = col.info()
n = col.count()
rng = np.random.default_rng(7)
sample = np.sort(rng.choice(acked, 500, replace=False))
got = {p["id"]: p for p in col.get([int(i) for i in sample], with_vectors=True)}
missing = [int(i) for i in sample if int(i) not in got]
# the stored vectors against the dataset's rows (cosine: normalized, then rounded to float16)
f = pq.ParquetFile(f"{dataset}/train.parquet", pre_buffer=False)
rows_per_group = f.metadata.row_group(0).num_rows
worst = 0.0
for i in sample[:50]:
    g, r = divmod(int(i), rows_per_group)
    emb = f.read_row_group(g, columns=["emb"]).column(0)[r].values.to_numpy(zero_copy_only=False).astype(np.float32)
    want = emb / np.linalg.norm(emb)
    worst = max(worst, float(np.abs(np.asarray(got[int(i)]["vector"]) - want).max()))
ok = n >= acked and not missing and worst < 1e-3
print(json.dumps({"ok": ok, "open_seconds": round(opened, 1), "recovery": col.recovery(), "points": info["points"], "count": n,
                  "acked_logged": acked, "sample_missing": missing, "max_abs_diff_of_50_vectors": worst,
                  "segments": len(info["segments"])}))
sys.exit(0 if ok else 1)
