"""The two formats the engine reads that their owners do not document, each against the
installed version, so that an upgrade that changes one fails here, loudly, by name:

- Tune's storage layout (`trials.layout`): a real Tune run of two trials (one fails) with
  the engine's folder names, read back through `trials.layout` alone;
- MLflow's saved runs view (`trials.store.ui.runs_view`): every key of the view the engine
  writes is one the installed MLflow UI's bundle reads.
"""

import json
import tempfile
from pathlib import Path

import pytest
from ray import tune

from trials import layout
from trials.store.ui import RUNS_VIEW, RUNS_VIEW_TAG, runs_view


class _Persist(tune.Callback):
    """The tracker's copy of each result into storage (`layout.persist_results`)."""

    def on_trial_result(self, iteration, trials, trial, result, **info):
        layout.persist_results(trial, lambda e, root: None)


def _trial(config):
    for step in (1, 2):
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "state.pt").write_bytes(b"weights")
            tune.report({"m/x": float(step), "step": step}, checkpoint=tune.Checkpoint.from_directory(d))
    if config["key"] == "b#0":
        raise RuntimeError("this trial fails")


def test_tune_lays_a_sweep_out_as_trials_layout_reads_it(tmp_path, ray_local):
    keys = ["a#0", "b#0"]
    tuner = tune.Tuner(
        _trial, param_space={"key": tune.grid_search(keys)},
        tune_config=tune.TuneConfig(trial_dirname_creator=lambda t: layout.trial_dirname(t.trial_id, t.config["key"])),
        run_config=tune.RunConfig(name="fmt", storage_path=str(tmp_path), verbose=0, callbacks=[_Persist()],
                                  failure_config=tune.FailureConfig(max_failures=0)))
    tuner.fit()
    exp_dir = tmp_path / "fmt"
    found = layout.trial_dirs(keys, exp_dir, with_results=False)
    assert sorted(found) == keys and all(len(d) == 1 for d in found.values()), list(exp_dir.iterdir())
    assert layout.trial_dirs(keys, exp_dir) == found  # each holds its result file
    for key in keys:
        results = layout.read_results(found[key])
        assert [r["m/x"] for r in results] == [1.0, 2.0] and [r["step"] for r in results] == [1, 2], results
        assert len(layout.checkpoints(exp_dir, key, "state.pt")) == 2  # Tune's checkpoint_<n> folders
    assert layout.errored(found["b#0"][0]) and not layout.errored(found["a#0"][0])  # Tune's error file
    assert (found["b#0"][0] / layout.ERROR_FILE).read_text().count("this trial fails") >= 1


def test_the_saved_runs_view_is_one_the_installed_mlflow_ui_reads():
    import mlflow

    bundle = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    scripts = list(bundle.glob("main.*.js"))
    if not scripts:
        pytest.fail(f"no MLflow UI bundle under {bundle}: the installed MLflow ships its UI elsewhere")
    text = "\n".join(p.read_text(errors="replace") for p in scripts)
    envelope = json.loads(runs_view(["D1"], ["spec/tau"], ("arm",), now_ms=0, sweep="mlp"))
    assert envelope["name"] == "mlp: factors and primary responses"  # the sweep's name, not "dspark" for every workload
    state = json.loads(envelope["state"])
    prefix, share_key = RUNS_VIEW_TAG[:-len(RUNS_VIEW)], "viewStateShareKey"
    missing = [k for k in [*envelope, *state, share_key, state["runsHiddenMode"]] if f'{k}' not in text]
    assert f'"{prefix}"' in text and not missing, (prefix, missing)


@pytest.mark.parametrize("sweep", ["demo", "demo-seed", "seed-questions", "paper-drafter"])
def test_the_saved_view_fits_factors_replicate_and_primary_responses_at_1600_px(sweep):
    """At 1600 px with MLflow's Assistant panel open the runs table is TABLE_PX wide: a
    shipped sweep's view puts the run name, the factors, the replicate and every primary
    response inside it (the demo's conf/ece_mean once fell off the right), and its charts
    are one bar chart per primary response, grouped by the first factor's levels."""
    from trials import validate
    from trials.store.keys import store_key
    from trials.store.ui import CHECKBOX_PX, TABLE_PX

    spec = validate.load_spec(Path(__file__).resolve().parents[2] / "sweeps" / f"{sweep}.yaml")
    responses = list(spec.responses)
    state = json.loads(json.loads(runs_view(list(spec.factors), responses, ("arm",) if spec.controls else (),
                                            now_ms=0, levels=spec.factors))["state"])
    shown = [c for c in state["columnOrder"] if c != "duration"]
    assert all(f"metrics.`{store_key(r)}`" in shown for r in responses) and "tags.`replicate`" in shown
    assert CHECKBOX_PX + sum(state["columnWidths"][c] for c in shown) <= TABLE_PX, state["columnWidths"]
    assert [c["metricKey"] for c in state["compareRunCharts"]] == [store_key(r) for r in responses]
    assert {c["type"] for c in state["compareRunCharts"]} == {"BAR"}
    first = next(iter(spec.factors))
    assert state["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": f"factor.{first}"}]
    assert set(state["groupsExpanded"]) == {f"tag.factor.{first}.{lv}" for lv in spec.factors[first]}
