"""Links into the MLflow UI, the sweep's saved runs view, and the commands' exact options.

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
TABLE_PX = 938  # the runs table's width in MLflow 3.17 at a 1600 px window with the Assistant panel open
CHECKBOX_PX = 73  # its row-selection column (as the grid draws it)


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


def runs_view(factors: list[str], responses: list[str], tags: tuple[str, ...] = (), now_ms: int | None = None,
              levels: dict[str, list[str]] | None = None, sweep: str = "sweep") -> str:
    """The value of RUNS_VIEW_TAG: MLflow 3's saved-view envelope around a runs-table state
    that lists the sweep's trials (not the parent), with the factors and the replicate first,
    then the primary responses, as columns (`columnOrder`: the table would put metrics before
    tags), each column as narrow as its values allow so that at 1600 px with MLflow's
    Assistant panel open every primary response is on screen. The trials are grouped by the
    first factor's levels (MLflow's run grouping, every group expanded: the table still lists
    each trial, under its level's mean), and the chart view is one bar chart per primary
    response with one bar per level (a response logged at the last training step would
    otherwise get MLflow's line chart against a step axis); its search box (a regular
    expression) holds the primary responses. MLflow's UI lists the view under "Views"; a link
    with `viewStateShareKey` opens it."""
    import json
    import re

    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    first = [f"tags.`{FACTOR_PREFIX}{f}`" for f in factors] + [f"tags.`{t}`" for t in (*tags, REPLICATE_TAG)]
    metrics = [f"metrics.`{store_key(r)}`" for r in responses]
    widths = _column_widths(first, metrics)
    state = {
        "selectedColumns": metrics + first,
        # the grid applies a saved width only to a column in this order: Run Name and Created
        # (pinned left) first, Duration last, where MLflow puts them
        "columnOrder": ["attributes.`Run Name`", "runDateAndNestInfo", *first, *metrics, "duration"],
        "columnWidths": widths,
        "searchFilter": f"tags.{TRIAL_KEY_TAG} != ''",
        "orderByKey": "tags.`mlflow.runName`", "orderByAsc": True,
        "runsHiddenMode": "SHOW_ALL",  # the charts' default is the first 10 runs
    }
    if factors:
        by = f"{FACTOR_PREFIX}{factors[0]}"
        state["groupBy"] = {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": by}]}
        state["groupsExpanded"] = {f"tag.{by}.{lv}": True for lv in (levels or {}).get(factors[0], [])}
        state["useGroupedValuesInCharts"] = True
    if responses:
        state["chartsSearchFilter"] = "^(" + "|".join(re.escape(store_key(r)) for r in responses) + ")$"
        state.update(_bar_charts(responses))
    return json.dumps({"name": f"{sweep}: factors and primary responses", "createdAt": now_ms,
                       "updatedAt": now_ms, "state": json.dumps(state)})


def _column_widths(first: list[str], metrics: list[str]) -> dict[str, int]:
    """At 1600 px with the Assistant panel open the runs table is about TABLE_PX wide: each
    column as wide as reads well, narrowed towards the least that still shows its values (a
    header may be cut: "factor.D…") until the run name, factors, replicate and primary
    responses fit."""
    cols = ["attributes.`Run Name`", "runDateAndNestInfo", *first, *metrics]
    wide = {cols[0]: 175, cols[1]: 85, **{c: 76 for c in first}, **{c: 88 for c in metrics}}
    least = {cols[0]: 150, cols[1]: 80, **{c: 58 for c in first}, **{c: 72 for c in metrics}}
    over, room = CHECKBOX_PX + sum(wide.values()) - TABLE_PX, sum(wide[c] - least[c] for c in cols)
    t = min(1.0, max(0.0, over / room)) if room else 0.0
    return {c: int(wide[c] - t * (wide[c] - least[c])) for c in cols} | {"duration": 60}


def _bar_charts(responses: list[str]) -> dict:
    """One bar chart per primary response in a section of their own: with the runs grouped,
    one bar per group (MLflow draws a response logged at a training step as a line against a
    step axis otherwise)."""
    section = "primary-responses"
    return {"compareRunSections": [{"uuid": section, "name": "primary responses", "display": True,
                                    "isReordered": False, "deleted": False, "isGenerated": False}],
            "compareRunCharts": [{"uuid": f"bar-{i}", "type": "BAR", "metricKey": store_key(r),
                                  "runsCountToCompare": 100, "metricSectionId": section,
                                  "deleted": False, "isGenerated": False} for i, r in enumerate(responses)]}


def exact_options(parser) -> None:
    """Refuse abbreviated options in every (sub)command of an argparse parser: `--stor 4`
    read as `--storage 4` is a guess a user did not make (argparse's default)."""
    import argparse

    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                exact_options(sub)


def mlflow_link(uri: str, experiment_id: str, parent_run_id: str, ui: str | None = None) -> str:
    """Where to look: the sweep's runs view, on the server itself for an HTTP store, else on
    `mlflow ui` over this store (or on `ui`, the UI's address given)."""
    link = ui_url(experiment_id, ui or default_ui_url(uri), view=True)
    if uri.startswith(("http://", "https://")) or ui:
        return f"MLflow: experiment {experiment_id} (parent run {parent_run_id}): {link}"
    return (f"MLflow: experiment {experiment_id} (parent run {parent_run_id}); browse with:\n"
            f"  mlflow ui --backend-store-uri {uri} --workers 1\n  then open {link}")
