"""Links into the MLflow UI, and the sweep's saved runs view.

The UI link (`ui_url`) names the model-training view, which MLflow 3 does not pick alone.
The saved runs view is an undocumented format of MLflow's UI (the `mlflow.sharedViewState.<key>`
experiment tag, a JSON envelope around the runs table's state): it is written here alone, and
`tests/trials/store/test_ui.py` reads it back through the installed MLflow's UI bundle so that
a change of that format fails loudly.
"""

from __future__ import annotations

import html
import re
import time

from .keys import FACTOR_PREFIX, REPLICATE_TAG, TRIAL_KEY_TAG, store_key

UI_URL = "http://127.0.0.1:5000"  # `mlflow ui` as the README starts it; `--ui-url` elsewhere
TRAINING_VIEW = "workflowType=machine_learning"
RUNS_VIEW = "sweep"  # the share key of a sweep's saved runs view
RUNS_VIEW_TAG = "mlflow.sharedViewState." + RUNS_VIEW  # an experiment tag: MLflow 3's saved views live there


_MARKUP = re.compile(r"([\\`*_\[\]|!#~$])")


def md_text(text: str) -> str:
    """Text from a sweep (a name, a level, a description) as MLflow's Markdown shows it: HTML's
    special characters as entities and Markdown's markup characters escaped, on one line, so
    that it is shown literally (never an image, a link or a table cell of its own)."""
    return _MARKUP.sub(r"\\\1", html.escape(str(text), quote=False)).replace("\r", " ").replace("\n", " ")


def ui_url(experiment_id: str, base: str = UI_URL, view: bool = False) -> str:
    """The MLflow UI's link to a sweep, opening in the model-training (runs) view; with
    `view`, in the sweep's saved runs view (`runs_view`: the trials with their factors and
    primary responses as columns).

    MLflow 3.17's UI picks the GenAI or the model-training view from the link's
    `workflowType` (else from the browser's last choice, GenAI at first) and ignores the
    experiment's `mlflow.experimentKind` tag, which is set as well for other MLflow versions.
    """
    if view:
        return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?viewStateShareKey={RUNS_VIEW}&{TRAINING_VIEW}"
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}?{TRAINING_VIEW}"


def default_ui_url(tracking_uri: str | None) -> str:
    """Where a store's UI is: an MLflow server serves its own; a file store needs `mlflow ui`
    (127.0.0.1:5000, as the README starts it)."""
    uri = tracking_uri or ""
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else UI_URL


def run_url(experiment_id: str, run_id: str, base: str = UI_URL) -> str:
    """The MLflow UI's page of one run, in the model-training view."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?{TRAINING_VIEW}"


def runs_view(factors: list[str], responses: list[str], tags: tuple[str, ...] = (), now_ms: int | None = None) -> str:
    """The value of RUNS_VIEW_TAG: MLflow 3's saved-view envelope around a runs-table state
    that lists the sweep's trials (not the parent), with the factors and the replicate first,
    then the primary responses, as columns (`columnOrder`: the table would put metrics before
    tags, and at 1600 px with MLflow's Assistant panel open the factors fell off the right);
    all of them in the charts, whose view opens on the primary responses' charts alone (its
    search box, a regular expression, holds them). MLflow's UI lists the view under "Views";
    a link with `viewStateShareKey` opens it."""
    import json
    import re

    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    first = [f"tags.`{FACTOR_PREFIX}{f}`" for f in factors] + [f"tags.`{t}`" for t in (*tags, REPLICATE_TAG)]
    metrics = [f"metrics.`{store_key(r)}`" for r in responses]
    state = {
        "selectedColumns": metrics + first,
        "columnOrder": first + metrics,
        "columnWidths": {"attributes.`Run Name`": 230, **{c: 90 for c in first}, **{c: 110 for c in metrics}},
        "searchFilter": f"tags.{TRIAL_KEY_TAG} != ''",
        "orderByKey": "tags.`mlflow.runName`", "orderByAsc": True,
        "runsHiddenMode": "SHOW_ALL",  # the charts' default is the first 10 runs
    }
    if responses:
        state["chartsSearchFilter"] = "^(" + "|".join(re.escape(store_key(r)) for r in responses) + ")$"
    return json.dumps({"name": "dspark: factors and primary responses", "createdAt": now_ms,
                       "updatedAt": now_ms, "state": json.dumps(state)})


