"""Scheduler study on large graphs: every supported native schedule and every vendor algorithm, timed
on the full graph AND on the probe sample, with the estimate's rank, one CSV row per (graph, op, K,
schedule). It is the data the selection policy is judged on offline: for any policy (top-k of the
estimate, sample probe, full-graph confirmation) the choice and its full-graph time can be read off.

Usage (on a GPU): python3 scripts/scale_study.py OUT.csv --graphs products-like,rmat-20 --ops spmm
                  --widths 1,2,4 [--repeat 5]
"""
from __future__ import annotations

import argparse
import csv
import sys
import time


def _measure(measure, dgraph, prepare, inputs, reference, repeat: int) -> dict:
    from autosage_cli.scheduler.probing.probe import REL_TOLERANCE, one_line
    try:
        plan = prepare()
    except Exception as exc:
        return {"status": "failed", "error": f"prepare: {one_line(exc)}"}
    try:
        out = measure.run(plan, inputs)
        err = 0.0 if reference is None else measure.rel_error(out, reference)
        if not err <= REL_TOLERANCE:
            return {"status": "wrong", "error": f"rel_err={err:.2e}", "rel_error": err}
        stats = measure.time(plan, inputs, out, repeat=repeat, warmup=1)
        return {"status": "ok", "ms": float(stats.median_ms), "rel_error": err, "out": out}
    except Exception as exc:
        return {"status": "failed", "error": f"run: {one_line(exc)}"}
    finally:
        close = getattr(plan, "close", None)
        if callable(close):
            close()


def _time_all(measure, graph, op, k, schedules, vendors, repeat):
    """{name: result} for every vendor (first, the first ok vendor is the reference) and schedule."""
    dgraph = measure.to_device(graph)
    inputs = measure.inputs(dgraph, op, k, 1, 0)
    results, reference = {}, None
    for v in vendors:
        r = _measure(measure, dgraph, lambda v=v: measure.prepare_vendor(dgraph, v, k, 1), inputs, reference,
                     repeat)
        if reference is None and r["status"] == "ok":
            reference = r["out"]
        r.pop("out", None)
        results[v] = r
    for s in schedules:
        r = _measure(measure, dgraph, lambda s=s: measure.prepare_native(dgraph, s, k, 1), inputs, reference,
                     repeat)
        r.pop("out", None)
        results[s.name] = r
    del dgraph, inputs, reference
    import cupy
    cupy.get_default_memory_pool().free_all_blocks()
    return results


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--graphs", default="products-like,reddit-like,rmat-20,products-like-shuffled")
    ap.add_argument("--ops", default="spmm,sddmm")
    ap.add_argument("--widths", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-sample", action="store_true")
    a = ap.parse_args()

    from autosage_cli.features import compute_features
    from autosage_cli.graphs import synthetic
    from autosage_cli.kernels import schedule as schedule_mod
    from autosage_cli.ops.cost import roofline
    from autosage_cli.scheduler import estimate
    from autosage_cli.scheduler.probing import probe, sample
    from autosage_cli import environment

    measure = probe.GpuMeasurer()
    dev = roofline.device_model(environment.device_info())
    fields = ["graph", "nnz", "op", "k", "name", "backend", "est_ms", "est_rank", "full_ms", "sample_ms",
              "status", "error", "sample_nnz"]
    with open(a.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for gname in a.graphs.split(","):
            t = time.time()
            graph = synthetic.generate(gname, seed=0)
            feats = compute_features(graph)
            sg = graph if a.no_sample or sample.probes_whole_graph(graph) else sample.sample_rows(graph)[0]
            print(f"{gname}: nnz={graph.nnz} sample={sg.nnz} gen+features {time.time() - t:.1f}s",
                  file=sys.stderr, flush=True)
            for op in a.ops.split(","):
                vendors = measure.vendor_names(op)
                for k in map(int, a.widths.split(",")):
                    t = time.time()
                    ranked = estimate.rank(feats, op, k, 1, dev)
                    scheds = [s for s, _ in ranked]
                    full = _time_all(measure, graph, op, k, scheds, vendors, a.repeat)
                    samp = {} if sg is graph else _time_all(measure, sg, op, k, scheds, vendors, a.repeat)
                    for i, name in enumerate(vendors + [s.name for s in scheds]):
                        f, s = full[name], samp.get(name, full[name])
                        est = ranked[i - len(vendors)][1] if i >= len(vendors) else None
                        w.writerow({"graph": gname, "nnz": graph.nnz, "op": op, "k": k, "name": name,
                                    "backend": "vendor" if i < len(vendors) else "native",
                                    "est_ms": est, "est_rank": i - len(vendors) + 1 if est is not None else "",
                                    "full_ms": f.get("ms"), "sample_ms": s.get("ms"), "status": f["status"],
                                    "error": f.get("error", ""), "sample_nnz": sg.nnz})
                    fh.flush()
                    ok = [(full[n]["ms"], n) for n in full if full[n]["status"] == "ok"]
                    print(f"  {op} K={k}: {len(scheds)} schedules, best {min(ok) if ok else None} "
                          f"({time.time() - t:.1f}s)", file=sys.stderr, flush=True)
            del graph, sg
    return 0


if __name__ == "__main__":
    sys.exit(main())
