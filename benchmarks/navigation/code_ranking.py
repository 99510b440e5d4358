#!/usr/bin/env python3
"""How well a per-vector code ranks the true neighbours: the share of the exact top-100 that
lies inside the top-N by the code's estimate, over all points (cosine sets). Compares a 1-bit
code (RaBitQ-style: centre, random rotation, sign bits, the unbiased estimator with its
per-vector factor <x_bar, o>) with a 4-bit per-dimension scalar code like diskvec's.

    PY benchmarks/navigation/code_ranking.py ../shared/datasets/wordnet-minilm384-50k [--queries 200]

Needs numpy and pyarrow. Offline, in memory: no index involved.
"""
import argparse

import numpy as np
import pyarrow.parquet as pq


def load(dataset, name):
    col = pq.read_table(f"{dataset}/{name}.parquet").column("emb").combine_chunks()
    width = len(col[0])
    rows = col.flatten().to_numpy(zero_copy_only=False).reshape(-1, width).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def one_bit_inner_products(x, q, seed):
    """Estimated <x, q> for every pair, from 1-bit codes of the rotated, centred x."""
    d = x.shape[1]
    rotation, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)).astype(np.float32))
    centre = x.mean(0)
    residual = x - centre
    norms = np.linalg.norm(residual, axis=1)
    unit = (residual / norms[:, None]) @ rotation.T
    signs = np.where(unit >= 0, 1.0, -1.0).astype(np.float32) / np.sqrt(d)
    factor = np.sum(signs * unit, axis=1)  # <x_bar, o>, stored per vector
    q_res = q - centre
    q_norms = np.linalg.norm(q_res, axis=1)
    q_unit = (q_res / q_norms[:, None]) @ rotation.T
    cosine = (q_unit @ signs.T) / factor[None, :]  # unbiased estimate of <o, q_unit>
    # <x, q> = <x - c, q - c> + <c, q> + <x, c> - |c|^2
    return (norms[None, :] * q_norms[:, None]) * cosine + (q @ centre)[:, None] \
        + (x @ centre)[None, :] - centre @ centre


def four_bit(x):
    low, high = x.min(0), x.max(0)
    step = (high - low) / 15
    return low + np.round((x - low) / step) * step


def share_in_top(estimate, truth, n):
    top = np.argpartition(-estimate, n, axis=1)[:, :n]
    return float(np.mean([len(set(t) & set(g)) / truth.shape[1] for t, g in zip(top, truth)]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dataset")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    x, q = load(a.dataset, "train"), load(a.dataset, "test")[:a.queries]
    truth = np.argsort(-(q @ x.T), axis=1)[:, :100]
    estimates = {"1-bit": one_bit_inner_products(x, q, a.seed), "4-bit": q @ four_bit(x).T}
    print("| code | " + " | ".join(f"top-{n}" for n in (100, 200, 400, 800)) + " |")
    print("|---|---:|---:|---:|---:|")
    for name, est in estimates.items():
        print(f"| {name} | " + " | ".join(f"{share_in_top(est, truth, n):.3f}" for n in (100, 200, 400, 800))
              + " |")


if __name__ == "__main__":
    main()
