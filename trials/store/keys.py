"""The names a sweep's records carry in MLflow, in one place: every tag, param and metric
key the engine writes and the statistics read, and the two queries that find a sweep's runs.
Plain names and string functions: importing it loads neither MLflow nor torch.

- Metric names: MLflow refuses '@', so a trainer's `val/acc@3` is stored as
  `val/acc:3`; `metric_name` maps it back. Tune's results keep the trainer's names.
- Tags: `mlflow.parentRunId` links a trial's run to its sweep's parent run (tagged
  `sweep_parent=true`); `factor.<name>` holds each factor's level.
"""

from __future__ import annotations

import hashlib
import json

PARENT_TAG = "mlflow.parentRunId"
SWEEP_PARENT_TAG = "sweep_parent"
FACTOR_PREFIX = "factor."
RESPONSES_TAG = "responses"  # on the parent: JSON {response: {better, margin}}, the primary responses
SEQUENTIAL_TAG = "sequential"  # on the parent: JSON of analysis.sequential.Plan: the declared plan and every look
PRIMARY_TERMS_TAG = "primary_terms"  # on the parent: JSON list of the spec's primary terms ([] = the default)
CONFIRMS_TAG = "confirms"  # on the parent: JSON {study, term, response, estimate, low, high, verdict} of a confirmation
CONTRASTS_TAG = "contrasts"  # on the parent: JSON {name: {from: {factor: level}, to: {...}}}, the spec's named contrasts
LOOK_PREFIX = "look."  # on the parent: look.<k> = JSON of that look's blocks, alpha, verdict counts and action
VERDICT_PREFIX = "verdict."  # on the parent: verdict.<response>.<term> = matters|negligible|undecided
# a trial run's tags (trials.spec.Trial.tags) and the parent's params and tags
TRIAL_KEY_TAG = "trial_key"  # cell + replicate: what finds a trial's run again
CELL_TAG, REPLICATE_TAG, SEED_TAG, ARM_TAG, RUN_ORDER_TAG = "cell", "replicate", "seed", "arm", "run_order"
DESCRIPTION_TAG = "description"
FACTORS_PARAM, DESIGN_PARAM = "factors", "design"  # the parent's: factor -> levels (JSON, spec order); full | 2^(k-p)
# on the parent, recorded when it is made: one sweep per name per store (`trials.driver.identity`)
STORAGE_TAG = "sweep.storage"  # the storage root the sweep's trials, checkpoints and kept records are in
TRIALS_TAG = "sweep.trials_sha256"  # a fingerprint of its first block's resolved trials (keys and configs)
# the parent's record of the sweep and its driver, and a run's history
SWEEP_TAG = "sweep"  # every run of a sweep: its name
REGISTRY_TAG = "registry"  # the parent: the workload's registry rows of its runs' names (`trials.sweep_record`)
WORKLOAD_TAG = "workload"  # the parent: the workload swept (`trials.workload`; absent before it was recorded)
GIT_COMMIT_TAG = "git_commit"
NOTE_TAG = "mlflow.note.content"  # MLflow's description of a run or an experiment
REPLICATES_PARAM, BASE_PARAM = "replicates", "base"
# the parent's sequential plan as declared, without looks: a param, which MLflow keeps write-once, so the
# looks recorded in SEQUENTIAL_TAG are checked against the plan they were spent under
PLAN_PARAM = "sequential"
DRIVER_HOST_TAG, DRIVER_PID_TAG, DRIVER_STARTED_TAG = "driver_host", "driver_pid", "driver_started"
RESUMED_TAG = "resumed"  # a trial run: how many times a sweep was resumed into it
RAY_NODES_TAG = "ray_nodes"  # a trial run: the Ray nodes it ran on
RESTARTS_TAG = "restarts"  # a trial run: how many times Tune restarted it
KILLED_REASON_TAG = "killed_reason"
RECOVERED_FROM_TAG = "recovered_from"  # the parent: the storage `trials recover` rebuilt it from
SHARED_PREFIX = "target."  # the parent: target.<hash> = the shared artifact's file
NODE_KEY = "node_id"  # in a trial's results: the Ray node that reported it
ERROR_TAG = "error"  # a failed run: the end of its error
REEVAL_PREFIX = "reeval."  # a trial run: reeval.<count field> = the count `trials reeval` last evaluated it with
PASS_TAG = "timing.pass"  # a timed trial's run: the id of the timing pass behind its values
SUMMARY_TAG = "timing"  # the parent: the last timing pass, as JSON
MARGINS_TAG = "attribution.margins"  # the parent: the margins the verdicts used
ALPHA_TAG = "attribution.alpha"  # the parent: the alpha, alpha*, family and terms they used
ERROR_KEY = "trial_error"  # in a trial's last result: "Type: message" of what its trainer raised (no retry)
TRAINER_ERROR_FILE = "trainer_error.txt"  # in the trial's folder: that error's traceback
DONE_KEY = "trial/done"  # 1.0 in a trial's last result (and metric): its final metrics were all reported
# the experiment's kind, for MLflow versions whose UI reads it (3.17 reads the link instead)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"


def store_key(name: str) -> str:
    """The stored name of a trainer metric (`val/acc@3` -> `val/acc:3`)."""
    return name.replace("@", ":")


def metric_name(stored: str) -> str:
    """The trainer's name of a stored metric (`val/acc:3` -> `val/acc@3`)."""
    return stored.replace(":", "@")


def sweep_trials(client, experiment_id: str, page_size: int = 5000) -> list:
    """Every trial run of a sweep's experiment (the runs with a trial key), all pages: the
    one query that decides which runs are a sweep's trials."""
    out, token, seen = [], None, set()
    for _ in range(MAX_PAGES):
        page = client.search_runs([experiment_id], f"tags.{TRIAL_KEY_TAG} != ''", max_results=page_size,
                                  page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out
        if token in seen:
            raise StoreReadError(f"experiment {experiment_id}: the store's pages repeat a page token; is this an "
                                 "MLflow server?")
        seen.add(token)
    raise StoreReadError(f"experiment {experiment_id}: over {MAX_PAGES} pages of runs; is this an MLflow server?")


MAX_PAGES = 1000  # pages of one listing (5,000 runs each): a next_page_token that never ends is refused


class StoreReadError(ConnectionError):
    """A store read failed (the REST reader's errors, in one line)."""


def sweep_parent(client, experiment_id: str):
    """The sweep's parent run in its experiment, or None."""
    found = client.search_runs([experiment_id], f"tags.{SWEEP_PARENT_TAG} = 'true'", max_results=1)
    return found[0] if found else None


def is_metric(key: str) -> bool:
    return "/" in key  # the trainer's names: val/loss, train/ms, acc@3, ...


def reeval_tag(field: str) -> str:
    """The tag a run carries once `trials reeval` evaluated it with a count (`reeval.<field>`,
    the field one of the workload's `reeval_counts`)."""
    return REEVAL_PREFIX + field


PART_CHARS = 5000  # the longest tag value written whole: MLflow cuts a tag at 8,000 characters
SPLIT_MARK = "split_tag"  # the header of a value stored in parts


def split_tag(key: str, value: str) -> dict[str, str]:
    """A tag value of any length as the tags that store it: a short one as itself; a longer
    one in parts `key/<digest>/1..n` and, last, a header in `key` (JSON: the part count, the
    length and the SHA-256 of the whole) that `read_split_tag` checks the parts against.
    The parts are named by the digest, so writing a new value never touches the parts the
    header in place names: a write cut short leaves the old value readable."""
    if len(value) <= PART_CHARS:
        return {key: value}
    digest = hashlib.sha256(value.encode()).hexdigest()
    parts = [value[i:i + PART_CHARS] for i in range(0, len(value), PART_CHARS)]
    tags = {part_key(key, digest, i): part for i, part in enumerate(parts, 1)}
    tags[key] = json.dumps({SPLIT_MARK: 1, "parts": len(parts), "chars": len(value), "sha256": digest})
    return tags


def part_key(key: str, digest: str, i: int) -> str:
    """The tag holding part `i` (from 1) of the value whose SHA-256 is `digest`."""
    return f"{key}/{digest[:16]}/{i}"


def is_part(key: str, tag: str) -> bool:
    """Whether `tag` holds a part of some value stored under `key` (`part_key`'s shape)."""
    head, _, rest = tag.partition(f"{key}/")
    digest, _, i = rest.partition("/")
    return head == "" and len(digest) == 16 and all(c in "0123456789abcdef" for c in digest) and i.isdigit()


def read_split_tag(tags: dict[str, str], key: str) -> str:
    """The whole value `split_tag` stored under `key` ("" where there is none); ValueError in
    one line where a part is missing or the parts do not add up to the header's total."""
    value = tags.get(key, "")
    if not value.startswith(f'{{"{SPLIT_MARK}"'):
        return value
    try:
        head = json.loads(value)
        n, chars, digest = int(head["parts"]), int(head["chars"]), str(head["sha256"])
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"the {key} record's header is malformed ({type(e).__name__}): {value[:120]}") from None
    if not 0 < n <= 10_000 or len(digest) != 64:
        raise ValueError(f"the {key} record's header is malformed: {value[:120]}")
    missing = [i for i in range(1, n + 1) if part_key(key, digest, i) not in tags]
    if missing:
        raise ValueError(f"the {key} record is stored in {n} parts and {len(missing)} are missing "
                         f"(part {missing[0]} first): it cannot be read whole")
    whole = "".join(tags[part_key(key, digest, i)] for i in range(1, n + 1))
    if len(whole) != chars or hashlib.sha256(whole.encode()).hexdigest() != digest:
        raise ValueError(f"the {key} record's {n} parts hold {len(whole)} characters that do not match its "
                         f"header ({chars} characters, sha256 {digest[:12]}...): a part was changed or cut")
    return whole
