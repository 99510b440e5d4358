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
from pathlib import Path

import diskvec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_large import check_acknowledged  # noqa: E402

db_dir, dataset, acked = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = time.time()
db = diskvec.open(db_dir)
col = db.collection("c")
opened = time.time() - t
info = col.info()


def fetch(ids):
    return {p["id"]: p["vector"] for p in col.get(ids, with_vectors=True)}


check = check_acknowledged(dataset, acked, col.count(), fetch)
print(json.dumps({"ok": check["ok"], "open_seconds": round(opened, 1), "recovery": col.recovery(),
                  "points": info["points"], "count": check["count"], "acked_logged": acked,
                  "sample_missing": check["sample_missing"],
                  "max_abs_diff_of_50_vectors": check["max_abs_diff_of_50_vectors"],
                  "segments": len(info["segments"])}))
sys.exit(0 if check["ok"] else 1)
