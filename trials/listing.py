"""`trials status` and `trials list`: a sweep's trials and its sweeps' states, read from
storage (and a store's parents for `list --tracking-uri`), each with its MLflow link."""

from __future__ import annotations

from pathlib import Path

from . import layout, saved, spec as specmod
from trials.store.client import absolute_uri, check_store, is_store_error, store_error
from trials.store.probe import probe_store
from trials.store.reader import reading_client
from trials.store.keys import sweep_parent
from trials.store.ui import RUNS_VIEW_TAG, default_ui_url, ui_url


def text_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "(no trials)"
    cols = list(rows[0])
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    line = "  ".join(c.ljust(width[c]) for c in cols)
    out = [line, "  ".join("-" * width[c] for c in cols)]
    out += ["  ".join(r[c].ljust(width[c]) for c in cols) for r in rows]
    return "\n".join(out)


def summary_counts(rows) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def show_status(spec, uri: str, storage: str | None, shown=()) -> None:
    rows = saved.status(spec, saved.storage_root(storage) / spec.name, uri, shown)
    causes = [(r["run"], r.pop("cause")) for r in rows if "cause" in r]
    print(text_table(rows))
    for line in saved.grouped_causes(causes):
        print(line)
    if any(v.startswith("~") for r in rows for v in r.values()):
        print("(~: a running trial's latest evaluation so far, not its final value; blank: none yet)")
    print(f"{spec.name}: {summary_counts(rows)}; MLflow experiment '{spec.name}' at {uri}")


def experiment_link(uri: str, name: str, ui: str | None = None) -> str:
    """The UI link of a sweep's experiment in its store ("" when the store lacks it): its
    saved runs view where the sweep wrote one."""
    exp = reading_client(uri).get_experiment_by_name(name)
    if exp is None:
        return ""
    return ui_url(exp.experiment_id, ui or default_ui_url(uri), view=RUNS_VIEW_TAG in exp.tags)


def saved_link(exp_dir: Path, uri: str, ui: str | None = None) -> str:
    """The UI link of a sweep's runs view, from where its storage says its records are ("" if
    it does not say)."""
    found = layout.saved_experiment(exp_dir)
    return ui_url(found["experiment_id"], ui or default_ui_url(uri), view=True) if found else ""


def cmd_status(args) -> int:
    spec, meta = saved.load_saved(args.name, args.storage, "status", layout=True)  # no workload imported
    uri = args.tracking_uri or meta["tracking_uri"]
    check_store(uri)  # a SQLite store that is gone is said at once; no server is asked: the states are storage's
    show_status(spec, uri, args.storage, meta.get("responses", []))
    return 0


def cmd_list(args) -> int:
    if args.tracking_uri:
        return list_store(absolute_uri(args.tracking_uri), args.ui_url)

    root = saved.storage_root(args.storage)
    rows = []
    for spec_file in sorted(root.glob("*/spec.yaml")) if root.is_dir() else []:
        name = spec_file.parent.name
        try:
            spec, meta = saved.load_saved(name, args.storage, "list", layout=True)
        except (specmod.SpecError, ValueError, OSError) as e:  # said in its row; the other sweeps still listed
            why = str(e).splitlines()[0].removeprefix("list: ").replace(f"{root}/", "")
            rows.append({"sweep": name, "trials": "", "state": f"unreadable: {why[:120]}", "tracking_uri": "",
                         "MLflow": ""})
            continue
        uri = meta.get("tracking_uri", "")
        link = ""
        try:
            check_store(uri)  # a SQLite store that is gone is said in the row; no server is asked (storage answers)
            state = summary_counts(saved.status(spec, root / name, uri, meta.get("responses", [])))
            link = saved_link(root / name, uri, args.ui_url)
        except Exception as e:  # one sweep's store down or refused: said in its row, the others still listed
            if not (isinstance(e, ValueError) or is_store_error(e)):
                raise
            state = str(e) if isinstance(e, ValueError) else store_error(uri, e)
        rows.append({"sweep": name, "trials": str(len(spec.trials)), "state": state, "tracking_uri": uri,
                     "MLflow": link})
    uris = {r["tracking_uri"] for r in rows}
    if len(uris) == 1 and "" not in uris:  # one store for every sweep: said once, the table stays narrow
        print(text_table([{k: v for k, v in r.items() if k != "tracking_uri"} for r in rows]))
        print(f"(every sweep's MLflow store: {uris.pop()})")
        return 0
    print(text_table(rows) if rows else f"no sweep under {root}")
    return 0


def list_store(uri: str, ui: str | None = None) -> int:
    """The sweeps a store records: each experiment with a sweep parent, its parent's state."""
    check_store(uri)
    probe_store(uri)
    client = reading_client(uri)
    rows = []
    for exp in client.search_experiments(max_results=1000):
        parent = sweep_parent(client, exp.experiment_id)
        if parent is not None:
            rows.append({"sweep": exp.name, "state": parent.info.status.lower(),
                         "MLflow": experiment_link(uri, exp.name, ui)})
    print(text_table(rows) if rows else f"no sweep recorded in {uri}")
    return 0
