"""Records -> the report document (``report.json``): summary, worst cases, studies, environment.

Everything here is a deterministic function of the records, the grid and the seed, except the
``generated_utc`` stamp and the ``environment`` block, so a resumed run and a run from scratch produce the
same report apart from those two.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import importlib.util
import os
import platform
import statistics
from collections import Counter, defaultdict

from .. import host
from ..judge import known_divergences, published, tolerances
from ..config import MODE_NAMES, RNNConfig
from .units import Unit, unit_command

SCHEMA_VERSION = 7  # 2: totals.planned_units and complete (partial runs); 3: policy.known_divergences;
# 4: backends[].plugin (where a plugin backend came from); 5: worst cases carry nonfinite_mismatch and list
# every failure; records carry error_in (the comparison an error ended); backends[].requested (named by
# --backends: unavailable, it fails the run, as does a run that planned no unit); 6: the published study
# (studies.published, records' published, totals.published_failed, worst cases' published); 7: environments (a
# fleet run's workers', by key; records' environment_key) and, where a run holds several, BACKEND@KEY groups
WORST_CASES = 20
DRIFT_MIN_STEPS = 100  # configs at least this long feed the drift study


def environment() -> dict:
    """Versions and machine: what a reader needs to reproduce the numbers."""
    import numpy

    env = {"python": platform.python_version(), "platform": platform.platform(), "machine": platform.machine(),
           **host.describe(), "cpu_count": os.cpu_count(), "numpy": numpy.__version__}
    for module in ("torch", "onnxruntime", "onnx", "hypothesis", "matplotlib"):
        env[module] = installed_version(module)
    import cudnn_backend

    ok, why = cudnn_backend.available()
    env["cudnn"] = cudnn_backend.versions() if ok else {"available": False, "reason": why}
    return env


def installed_version(module: str) -> str | None:
    """The version of the package ``module`` where this process can import it, ``None`` where it cannot; read
    from its installed metadata, without importing it (``import torch`` alone takes seconds, and every report
    run and fleet worker says what is installed), else from the imported module's ``__version__`` (a
    distribution named otherwise, as ``onnxruntime-gpu``)."""
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except (ImportError, ValueError):  # (a package hidden from this process raises here as its import would)
        return None
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        try:
            return __import__(module).__version__
        except ImportError:
            return None


def environments(records: list[dict]) -> list[dict]:
    """The environments of the workers that made ``records`` (a fleet run's carry theirs), by key: ``key``,
    ``hosts``, ``units`` and ``environment``; ``[]`` for a run on this machine's processes."""
    found: dict[str, dict] = {}
    for r in records:
        if isinstance(r.get("environment"), dict) and isinstance(r.get("environment_key"), str):
            entry = found.setdefault(r["environment_key"], {"key": r["environment_key"], "hosts": [], "units": 0,
                                                            "environment": r["environment"]})
            entry["units"] += 1
            host = str(r["environment"].get("host"))
            if host not in entry["hosts"]:
                entry["hosts"].append(host)
    return [found[k] for k in sorted(found)]


def placed_backend(record: dict, several: bool) -> str:
    """The backend a record is grouped under: ``BACKEND@KEY`` where a run holds ``several`` environments."""
    key = record.get("environment_key")
    return f"{record['backend']}@{key}" if several and key else record["backend"]


def config_label(config: dict, with_dtype: bool = True) -> str:
    """The short label of a record's config."""
    cfg = RNNConfig(**{**config, "lengths": tuple(config["lengths"]) if config["lengths"] else None})
    return cfg.short(with_dtype)


def _judged(record: dict, kind: str):
    """(quantity, verdict) pairs of a compat record that were judged (not indeterminate)."""
    for q, v in (record.get(kind) or {}).items():
        if not v.get("indeterminate"):
            yield q, v


def budget_share(v: dict) -> float:
    """Share of the budget used: conditioned error / budget; inf for a non-finite error or for non-finite
    mismatches (which fail a quantity whatever the error of its finite entries)."""
    c = v.get("conditioned")
    return float("inf") if c is None or v.get("nonfinite_mismatch") else c / v["budget"]


def tf32_stray(v: dict) -> dict | None:
    """A quantity's record's ``tf32_first_step`` where its first step strayed past its bound from every TF32 truth
    (``tolerances.TF32_FIRST_STEP_SHARE``), else ``None``."""
    first = v.get("tf32_first_step")
    return first if first and first["share"] > first["bound"] else None


def group_worst(row: dict) -> tuple[float, str] | None:
    """The worst of a summary row (one backend, dtype and mode) as ``(share of the budget, label)``: an
    error above everything (``inf``, "error"), then the largest share ("non-finite" for ``inf``); ``None``
    when nothing was judged."""
    if row["errors"]:
        return float("inf"), "error"
    shares = [budget_share(w) for w in (row["worst_forward"], row["worst_gradient"]) if w]
    if not shares:
        return None
    share = max(shares)
    return share, "non-finite" if share == float("inf") else f"{share:.2g}"


def _compact(record: dict) -> dict:
    keep = {"id", "study", "backend", "config", "status", "passed", "indeterminate", "error", "error_in", "reproduce",
            "variant", "published", "environment_key"}
    out = {k: v for k, v in record.items() if k in keep}
    if "variant" in out:
        out["variant"] = {k: v for k, v in out["variant"].items() if k != "per_step_abs"}
    for kind in ("forward", "gradients"):
        if kind in record:
            out[kind] = {q: {k: v for k, v in stats.items() if k != "per_step"} for q, stats in record[kind].items()}
    return out


def _worst(records: list[dict], kind: str) -> dict | None:
    best = None
    for r in records:
        for q, v in _judged(r, kind):
            if best is None or budget_share(v) > budget_share(best[1]):
                best = (q, v)
    if best is None:
        return None
    return _quantity(*best)


def _quantity(q: str, v: dict) -> dict:
    """A quantity's verdict as the worst-case lists show it."""
    return {"quantity": q, "conditioned": v["conditioned"], "budget": v["budget"],
            "nonfinite_mismatch": v.get("nonfinite_mismatch", 0),
            **({"tf32_first_step": v["tf32_first_step"]} if v.get("tf32_first_step") else {})}


def build_report(records: list[dict], grid: str, seed: int, backends: list[dict],
                 skipped: list[tuple[str, str, RNNConfig]], env: dict | None = None,
                 planned: list[str] | None = None, policy: dict | None = None) -> dict:
    """The report of ``records`` (``planned``: the ids of the units planned, default those of ``records``;
    fewer records make it incomplete) in ``env`` (default: this machine's :func:`environment`), judged by
    ``policy`` (default: this version's :func:`policy_summary`)."""
    planned_ids = set(r["id"] for r in records) if planned is None else set(planned)
    compat = [r for r in records if r["study"] == "compat"]
    places = environments(records)
    several = len(places) > 1
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in compat:
        groups[(placed_backend(r, several), r["config"]["dtype"], r["config"]["mode"])].append(r)

    summary = [{"backend": backend, "dtype": dtype, "mode": mode, "units": len(rs), **_tally(rs),
                "worst_forward": _worst(rs, "forward"), "worst_gradient": _worst(rs, "gradients")}
               for (backend, dtype, mode), rs in sorted(groups.items())]

    worst = []
    for r in compat:  # one entry per comparison (forward, gradients): its worst quantity
        for kind in ("forward", "gradients"):
            judged = sorted(_judged(r, kind), key=lambda qv: (qv[1]["passed"], -budget_share(qv[1])))
            if judged:
                worst.append({"id": r["id"], "backend": placed_backend(r, several),
                              "config": config_label(r["config"]), **_quantity(*judged[0]),
                              "passed": all(v["passed"] for v in r[kind].values()),
                              "reproduce": r["reproduce"][kind]})
    worst += [_error_case(r) for r in records if r["status"] == "error"]  # a study unit's error fails the run too
    missed = [r for r in records if r["study"] == "published" and r["status"] == "ok" and not r["passed"]]
    worst += [_published_case(r) for r in missed]  # a checksum outside its bound from cuDNN's own fails it too
    # The failures first (a TF32 result's first step may stray from the TF32 truth within its budget), by
    # share of the budget, and all of them are kept.
    worst.sort(key=lambda w: (w["passed"], -budget_share(w), w["id"], w["quantity"]))
    worst = worst[:max(WORST_CASES, sum(not w["passed"] for w in worst))]

    report = {
        "schema_version": SCHEMA_VERSION,
        "generated_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "grid": grid,
        "seed": seed,
        "environment": env if env is not None else environment(),
        "environments": places,
        "backends": backends,
        "policy": policy if policy is not None else policy_summary(),
        "totals": {"units": len(records), "planned_units": len(planned_ids), "compat_units": len(compat), **_tally(compat),
                   "errors": _tally(records)["errors"],  # a GRU-variant unit can fail with an error too
                   "published_failed": len(missed)},
        "summary": summary,
        "worst": worst,
        "skipped": [{"backend": b, "reason": why, "count": n}
                    for (b, why), n in sorted(Counter((b, why) for b, why, _ in skipped).items())],
        "unrun": _unrun(skipped, planned_ids, [b["name"] for b in backends]),
        "studies": {"drift": _drift(compat), "gru_variant": _gru_variant(records),
                    "amplification": _amplification(compat), "published": _published(records),
                    "tf32": _tf32(compat)},
        "records": [_compact(r) for r in records],
    }
    report["passed"] = (report["totals"]["failed"] == 0 and report["totals"]["errors"] == 0 and not missed
                        and bool(planned_ids) and not unavailable_requested(report))
    report["complete"] = len(records) >= len(planned_ids)
    return report


def policy_summary() -> dict:
    """The tolerance policy that judges a run, as its report shows it: the measure, the budgets per dtype
    and quantity, the overrides and the known divergences, each with its reason (those that plugin peers
    declare for themselves included)."""
    return {
        "measure": "max|x - truth| / (eps(dtype) * max(1, max|truth|) * max(1, kappa))",
        "budgets": {f"{d}/{k}": {"bound": b.bound, "reason": b.reason} for (d, k), b in tolerances.DEFAULTS.items()},
        "overrides": [{"peer": o.peer, "dtype": o.dtype, "quantity": o.quantity, "bound": o.budget.bound,
                       "reason": o.budget.reason} for o in tolerances.all_overrides()],
        "known_divergences": [{"peer": d.peer, "area": d.area, "modes": list(d.modes), "reason": d.reason}
                              for d in known_divergences.ledger()],
        "tf32_first_step": {"bound": tolerances.TF32_FIRST_STEP_SHARE.bound,
                            "reason": tolerances.TF32_FIRST_STEP_SHARE.reason},
    }


def _error_case(r: dict) -> dict:
    """The worst-cases entry of a unit that ended in an error, with the command that runs it again: a
    comparison's own (both, one after the other, when a worker died and where is unknown), or for a study
    unit the command that runs the unit."""
    if r["study"] == "compat":
        label = config_label(r["config"])
        command = r["reproduce"][r["error_in"]] if "error_in" in r else "; ".join(r["reproduce"].values())
    else:
        label = f"{r['study']} {config_label(r['config'])}"
        command = unit_command({k: r[k] for k in ("study", "backend", "config")})
    return {"id": r["id"], "backend": r["backend"], "config": label, "quantity": "error", "conditioned": None,
            "budget": None, "nonfinite_mismatch": 0, "passed": False, "reproduce": command, "error": r["error"]}


def _published_case(r: dict) -> dict:
    """The worst-cases entry of a published unit with a checksum outside its bound: the checksum furthest out
    (relative to its bound), its numbers, and the command that runs the unit again."""
    p = r["published"]
    run, name, delta = max(((run, name, delta) for run in p["runs"] for name, delta in run["relative"].items()),
                           key=lambda found: abs(found[2]) / p["bound"][found[1]])
    return {"id": r["id"], "backend": r["backend"], "config": f"published {config_label(r['config'])}",
            "quantity": name, "conditioned": None, "budget": None, "nonfinite_mismatch": 0, "passed": False,
            "reproduce": unit_command({k: r[k] for k in ("study", "backend", "config")}),
            "published": f"{p['source']}'s checksum {name} {p['checksums'][name]:.7e} is {delta:+.2e} from cuDNN's "
                         f"published {run['name']} value {run['checksums'][name]:.6e}, beyond its bound "
                         f"{p['bound'][name]:.2e}"}


def unavailable_requested(report: dict) -> list[dict]:
    """The backends the run was asked for by name (``--backends``) that could not run: they fail it."""
    return [b for b in report["backends"] if b.get("requested") and not b["available"]]


def _tally(records: list[dict]) -> dict[str, int]:
    """Units passed (and judged), failed, passed but indeterminate, and ended by an error."""
    return {"passed": sum(r["passed"] and not r["indeterminate"] for r in records),
            "failed": sum(not r["passed"] for r in records),
            "indeterminate": sum(r["passed"] and r["indeterminate"] for r in records),
            "errors": sum(r["status"] == "error" for r in records)}


def _unrun(skipped: list[tuple[str, str, RNNConfig]], planned: set[str], backends: list[str]) -> list[dict]:
    """Configs of the grid that no selected backend could run (no planned unit computes them, whether or
    not it has run yet), each with every backend's reason."""
    reasons: dict[str, dict] = {}
    for backend, why, cfg in skipped:
        key = cfg.to_json()
        if not any(Unit(study, name, cfg).id in planned for name in backends for study in ("compat", "published")):
            entry = reasons.setdefault(key, {"config": cfg.short(), "reasons": {}})
            entry["reasons"][backend] = why
    return [reasons[k] for k in sorted(reasons)]


def _drift(compat: list[dict]) -> list[dict]:
    """Per-step output error of every long config (and of its input gradient, where there is one)."""
    out = []
    for r in compat:
        cfg = r["config"]
        if cfg["seq_len"] < DRIFT_MIN_STEPS or r["status"] != "ok":
            continue
        entry = {"id": r["id"], "backend": r["backend"], "dtype": cfg["dtype"], "mode": cfg["mode"],
                 "label": config_label(cfg), "shape": config_label(cfg, with_dtype=False),
                 "output": r["forward"]["output"]["per_step"]}
        if "gradients" in r:
            entry["d_input"] = r["gradients"]["d_input"]["per_step"]
        out.append(entry)
    return out


def _gru_variant(records: list[dict]) -> list[dict]:
    rows = [{"seq_len": r["config"]["seq_len"], "weight_scale": r["config"]["weight_scale"],
             "max_abs": r["variant"]["max_abs"], "final_h_max_abs": r["variant"]["final_h_max_abs"],
             "per_step_abs": r["variant"]["per_step_abs"]}
            for r in records if r["study"] == "gru_variant" and r["status"] == "ok"]
    return sorted(rows, key=lambda row: (row["weight_scale"], row["seq_len"]))


def _published(records: list[dict]) -> list[dict]:
    """The published study: a row per mode and checksum (the sample's order) with cuDNN's published values
    (``published``: run name -> value, the golden run first), the largest relative ``drift`` of a later run
    from the golden one (``None`` where only one printed it), and ``values``: the float64 truth's, then each
    backend's (by name), each with its relative difference from the golden value, its bound, and whether every
    published value is within that bound. The numbers are the records' own (see ``units._run_published``)."""
    done = sorted((r for r in records if r["study"] == "published" and r["status"] == "ok"),
                  key=lambda r: (r["config"]["dtype"] != "float64", r["backend"]))
    rows: dict[tuple[str, str], dict] = {}
    for r in done:
        p, mode = r["published"], r["config"]["mode"]
        golden, later = p["runs"][0], p["runs"][1:]
        for name in golden["checksums"]:
            drifts = [d for run in later for n, d in published.relative(run["checksums"], golden["checksums"]).items()
                      if n == name]
            row = rows.setdefault((mode, name), {
                "mode": mode, "checksum": name, "drift": max(drifts, key=abs) if drifts else None,
                "published": {run["name"]: run["checksums"][name] for run in p["runs"] if name in run["checksums"]},
                "values": []})
            if name in p["checksums"]:
                row["values"].append({
                    "source": p["source"], "dtype": r["config"]["dtype"], "value": p["checksums"][name],
                    "relative": golden["relative"][name], "bound": p["bound"][name],
                    "passed": all(abs(run["relative"][name]) <= p["bound"][name] for run in p["runs"]
                                  if name in run["relative"])})
    order = {m: k for k, m in enumerate(MODE_NAMES)}
    names = list(published.CHECKSUMS)
    return [rows[key] for key in sorted(rows, key=lambda key: (order[key[0]], names.index(key[1])))]


def _tf32(compat: list[dict]) -> list[dict]:
    """Per TF32 backend and dtype, how its first steps were computed (``tf32_first_step`` of its outputs,
    ``compare.first_step_fit``): the steps judged, how many each TF32 truth fitted best (its GEMMs and rule,
    ``"none"``: computed without TF32), the largest share of TF32's cost and how many strayed past the bound."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)  # the output verdicts judged so
    for r in compat:
        output = r["forward"].get("output", {}) if r["status"] == "ok" else {}
        if output.get("tf32_first_step"):
            groups[(r["backend"], r["config"]["dtype"])].append(output)
    rows = []
    for (backend, dtype), outputs in sorted(groups.items()):
        fits = [v["tf32_first_step"] for v in outputs]
        named = Counter("+".join(f["gemms"]) + f", {f['rule']}" if f["gemms"] else "none" for f in fits)
        rows.append({"backend": backend, "dtype": dtype, "judged": len(fits), "fits": dict(named.most_common()),
                     "largest_share": max(f["share"] for f in fits),
                     "strayed": sum(tf32_stray(v) is not None for v in outputs)})
    return rows


def _amplification(compat: list[dict]) -> list[dict]:
    """How much larger the gradients' errors are than the forward pass's, per (backend, dtype, mode)."""
    groups: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in compat:
        if r["status"] != "ok" or "gradients" not in r or r["indeterminate"]:
            continue
        fwd = max(v["max_eps"] for v in r["forward"].values())
        grad = max(v["max_eps"] for v in r["gradients"].values())
        groups[(r["backend"], r["config"]["dtype"], r["config"]["mode"])].append((fwd, grad))
    rows = []
    for (backend, dtype, mode), pairs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                               MODE_NAMES.index(kv[0][2]))):
        ratios = [g / f for f, g in pairs if f > 0]
        rows.append({"backend": backend, "dtype": dtype, "mode": mode, "units": len(pairs),
                     "forward_max_eps": max(f for f, _ in pairs), "gradient_max_eps": max(g for _, g in pairs),
                     "median_ratio": statistics.median(ratios) if ratios else None,
                     "max_ratio": max(ratios) if ratios else None})
    return rows
