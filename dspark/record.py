"""The MLflow record format of a sweep, in one place: what the writer (`trials`) puts in
the store and the reader (`analysis`) takes out. Plain names and string functions only:
importing it loads neither MLflow nor torch, so `analysis` stays free of both `trials`
and torch.

- Metric names: MLflow refuses '@', so the trainer's `tf/accept@3` is stored as
  `tf/accept:3`; `metric_name` maps it back. Tune's results keep the trainer's names.
- Tags: `mlflow.parentRunId` links a trial's run to its sweep's parent run (tagged
  `sweep_parent=true`); `factor.<name>` holds each factor's level.
- The UI link (`ui_url`) names the model-training view, which MLflow 3 does not pick alone.
- The default store is `sqlite:///mlflow.db`; a relative sqlite path is resolved against
  the current folder and saved absolute.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
PARENT_TAG = "mlflow.parentRunId"
SWEEP_PARENT_TAG = "sweep_parent"
FACTOR_PREFIX = "factor."
RESPONSES_TAG = "responses"  # on the parent: JSON {response: {better, margin}}, the primary responses
SEQUENTIAL_TAG = "sequential"  # on the parent: JSON of analysis.sequential.Plan (the looks of `trials augment`)
LOOK_PREFIX = "look."  # on the parent: look.<k> = JSON of that look's blocks, alpha, verdict counts and action
VERDICT_PREFIX = "verdict."  # on the parent: verdict.<response>.<term> = matters|negligible|undecided
SQLITE = "sqlite:///"
# the experiment's kind, for MLflow versions whose UI reads it (3.17 reads the link instead)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"


def store_key(name: str) -> str:
    """The stored name of a trainer metric (`tf/accept@3` -> `tf/accept:3`)."""
    return name.replace("@", ":")


def metric_name(stored: str) -> str:
    """The trainer's name of a stored metric (`tf/accept:3` -> `tf/accept@3`)."""
    return stored.replace(":", "@")


def tag_key(text: str) -> str:
    """Text made a valid MLflow tag key (letters, digits, '_', '-', '.', ' ', ':', '/')."""
    return "".join(ch if ch.isalnum() or ch in "_-. :/" else "_" for ch in text)


def is_metric(key: str) -> bool:
    return "/" in key  # the trainer's names: val/bpb, tf/tau, spec/accept@3, ...


def ui_url(experiment_id: str, base: str = "http://127.0.0.1:5000") -> str:
    """The MLflow UI's link to a sweep, opening in the model-training (runs) view.

    MLflow 3.17's UI picks the GenAI or the model-training view from the link's
    `workflowType` (else from the browser's last choice, GenAI at first) and ignores the
    experiment's `mlflow.experimentKind` tag, which is set as well for other MLflow versions.
    """
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}?workflowType=machine_learning"


def absolute_uri(uri: str) -> str:
    """A relative sqlite path made absolute, so that every command works from any folder."""
    if uri.startswith(SQLITE) and not uri.startswith(SQLITE + "/"):
        return SQLITE + str(Path(uri[len(SQLITE):]).expanduser().resolve())
    return uri


def check_store(uri: str | None) -> None:
    """A reading command creates nothing: a SQLite store that does not exist is refused
    (MLflow would create an empty one)."""
    if uri and uri.startswith(SQLITE):
        path = Path(uri[len(SQLITE):])
        if not path.is_file():
            raise ValueError(f"tracking-uri: {path} does not exist")
