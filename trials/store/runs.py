"""MLflow records of a run, shared by `dspark train --tracking-uri` (one run) and the
sweeps' tracker in `trials` (one run per trial): the same params (every config field),
metric names (`trials.store.keys.store_key`), source tags and artifacts, so a single run and a
trial read the same in the MLflow UI. MLflow is imported only when a run is tracked.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
import time
from pathlib import Path

from .items import FORMAT, ITEMS_FILE, ITEMS_TAG, document, is_item_column, responses_of

from .keys import ERROR_TAG, EXPERIMENT_KIND_TAG, MODEL_TRAINING, is_metric, store_key
from .client import tracking_client
from .reader import run_item_document


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def source_tags(entry_point: str, commit: str | None = None) -> dict[str, str]:
    """MLflow's standard source columns: who ran a run, from which entry point and commit."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return {"mlflow.source.type": "LOCAL", "mlflow.source.name": entry_point,
            "mlflow.source.git.commit": commit or git_commit(), "mlflow.user": user}


def finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(float(v))


def config_params(config: dict) -> dict[str, str]:
    """The full resolved config, as MLflow's string params."""
    return {k: str(v) for k, v in config.items()}


def log_params(client, run_id: str, params: dict[str, str]) -> None:
    from mlflow.entities import Param

    batch = [Param(k, v) for k, v in params.items()]
    for i in range(0, len(batch), 90):
        client.log_batch(run_id, params=batch[i:i + 90])


def loggable(result: dict, step: int, last: dict[str, int]) -> dict:
    """What of a trial's result to log at `step`: its metrics (`is_metric`) not logged at this
    step or a later one (`last`: each name's last step; a resumed trial repeats older steps),
    a NaN left out (not measured yet) but an item column's kept (a group its removal left
    undefined: the items keep every group, so that a reader counts them all)."""
    return {k: v for k, v in result.items()
            if is_metric(k) and (finite(v) or is_item_column(k)) and step > last.get(k, -1)}


def log_metrics(client, run_id: str, metrics: dict, step: int) -> None:
    """One batch per report; a NaN (not measured) is not logged. The item columns
    (`trials.store.items`: `jack/...`, `split/...`) go to the run's items artifact, not its metrics."""
    from mlflow.entities import Metric

    ts = int(time.time() * 1000)
    batch = [Metric(store_key(k), float(v), ts, step) for k, v in metrics.items()
             if finite(v) and not is_item_column(k)]
    for i in range(0, len(batch), 900):
        client.log_batch(run_id, metrics=batch[i:i + 900])
    items = {k: v for k, v in metrics.items() if is_item_column(k)}
    if items:
        log_items(client, run_id, items, {r: metrics[r] for r in responses_of(items) if r in metrics})


def log_items(client, run_id: str, columns: dict, values: dict | None = None) -> None:
    """The run's items artifact (`items.json`) with `columns` merged in (a response's groups
    replace its earlier ones), bound to the run and to the values logged with them (`values`),
    then its tag: the readers read the artifact of a tagged run."""
    doc = document(columns, run_item_document(client, client.get_run(run_id)), run_id, values)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, ITEMS_FILE).write_text(json.dumps(doc, sort_keys=True))
        client.log_artifact(run_id, str(Path(tmp, ITEMS_FILE)))
    client.set_tag(run_id, ITEMS_TAG, FORMAT)


def log_run_files(client, run_id: str, config: dict, final: dict, artifacts_dir: Path | None) -> None:
    """config.json and final_metrics.json, and the run's plots (under `plots/`)."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "config.json").write_text(json.dumps(config, indent=2))
        Path(tmp, "final_metrics.json").write_text(json.dumps(final, indent=2, sort_keys=True))
        client.log_artifacts(run_id, tmp)
    if artifacts_dir is not None and Path(artifacts_dir).is_dir():
        client.log_artifacts(run_id, str(artifacts_dir), artifact_path="plots")


class TrainRun:
    """One `dspark train` run as an MLflow run: params, tags and metric names as a trial's."""

    def __init__(self, tracking_uri: str, experiment: str, run_name: str, config: dict, tags: dict[str, str]):
        self.client = tracking_client(tracking_uri)
        exp = self.client.get_experiment_by_name(experiment)
        self.experiment_id = exp.experiment_id if exp else self.client.create_experiment(
            experiment, tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING})
        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={**tags, **source_tags("dspark train")})
        self.run_id = run.info.run_id
        self.config = config
        self._last: dict[str, int] = {}
        log_params(self.client, self.run_id, config_params(config))

    def log(self, metrics: dict, step: int) -> None:
        """Each metric once per step (the final report repeats the last evaluation's)."""
        new = {k: v for k, v in metrics.items() if "/" in k and finite(v) and step > self._last.get(k, -1)}
        log_metrics(self.client, self.run_id, new, step)
        self._last.update({k: step for k in new})

    def finish(self, status: str, final: dict | None = None, artifacts_dir: Path | None = None,
               error: str | None = None) -> None:
        if final is not None:
            log_run_files(self.client, self.run_id, self.config, final, artifacts_dir)
        if error:
            self.client.set_tag(self.run_id, ERROR_TAG, error[-4900:])
        self.client.set_terminated(self.run_id, status=status)
