"""What every metric means, in one table: its name, which direction is better, its unit,
the stages that measure it, where it is degenerate or constant, and whether it is a
headline column. It is DSpark's metric registry as the engine reads it (`Workload.metrics`;
the rules over the rows, such as which direction is better or why a stage cannot rank a
metric, are `trials.registry`'s): attribution, the report, Tune's progress columns, the
trainer's console line and the Responses table in docs/responses.md all read it; adding a
response means adding a row here and the code that computes it.

Names are the trainer's (`tf/accept@3`); a family row (`tf/accept@k`) covers every slot
or threshold suffix, and a `_sts` suffix (after Sequential Temperature Scaling) shares its
base metric's row. Plain data only: importing it loads neither torch nor MLflow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

STAGES = ("drafter", "backbone")

# In the backbone stage the teacher-forced evaluator compares the draft (the LM's own
# logits plus the head's bias) with the LM's own logits, so tf/* measure only how small
# the bias is (an aligned head drives it to zero: tf/tau -> K+1).
BACKBONE_TF = ("degenerate in the backbone stage: the draft is the LM's own logits plus a bias and is "
               "scored against those same logits, so it measures only the size of the bias "
               "(aligned: tf/tau = K+1 by construction)")
SHARED_TARGET = "constant in the drafter stage: every trial of a sweep shares one frozen target"


@dataclass(frozen=True)
class Metric:
    name: str  # the trainer's name; `@k` / `@t` stands for a slot or threshold family
    better: str  # "higher", "lower" or "" (a diagnostic with no better direction)
    unit: str
    stages: tuple[str, ...]  # the parallel stages that measure it
    meaning: str
    degenerate_in: dict[str, str] | None = None  # stage -> why it cannot rank arms there
    constant_in: dict[str, str] | None = None  # stage -> why it does not vary across a sweep
    headline: bool = False  # a column of the progress table and the console line
    timed: bool = False  # wall-clock: measured by the interleaved timing pass (`trials time`), not by the trial
    # a ratio's break-even (1.0: as fast as the baseline) and what it means when every arm is below it
    break_even: float | None = None
    below: str = ""
    # the evaluation count its items (`report(..., items=)`) are drawn on, a column of the run:
    # the statistics check a run's item count against it and scale the count in plans
    items: str = ""
    # {flag, same, why}: it cannot rank runs whose `flag` column is 1 in every run while their
    # `same` column holds one value ({at}: the name's suffix after @; {same}: that value)
    degenerate_when: dict[str, str] | None = None
    curve: str = ""  # a family the report plots as one curve over its slots: the curve's title
    raised_by: str = ""  # an evaluation count's row: the config field `trials reeval --FIELD N` raises it with
    item_seconds: str = ""  # an evaluation count's row: the metric of the seconds one of its items costs a run
    # a mean over its items: the prompt groups' own values that runs kept before the jackknife
    # (`split/<name>@g<i>`) are its pseudo-values
    mean_of_items: bool = False

    def __post_init__(self):
        if self.better not in ("higher", "lower", ""):
            raise ValueError(f"metric {self.name}: better must be 'higher', 'lower' or '', got {self.better!r}")
        bad = set(self.stages) - set(STAGES)
        if not self.stages or bad:
            raise ValueError(f"metric {self.name}: stages must be among {STAGES}, got {self.stages!r}")


BOTH = STAGES
# a capacity curve (flat, or falling as 1/B from B = 1) on which Algorithm 1 verifies one length
# for every request of every run: its throughput then ranks tau, not the scheduler
ALG1_FLAT = {"flag": "sched/alg1_fixed@{at}", "same": "sched/alg1_len@{at}",
             "why": "degenerate on this capacity curve: Algorithm 1 verifies {same} token(s) for every request of "
                    "every run at {at}, so it ranks tau, not the scheduler"}
DRAFTER = ("drafter",)
_TF_DEGENERATE = {"backbone": BACKBONE_TF}

REGISTRY: tuple[Metric, ...] = (
    Metric("val/bpb", "lower", "bits/byte", BOTH, "the LM's bits per byte on the validation split",
           constant_in={"drafter": SHARED_TARGET}, headline=True),
    Metric("train/step_ms", "lower", "ms", BOTH,
           "one training step of the arm's configuration (forward, backward, optimizer), timed by the "
           "interleaved timing pass (`trials time`): every arm in every round on one node", timed=True),
    Metric("train/step_ms_sweep", "lower", "ms", BOTH,
           "mean wall time of one training step over the stage, timed inside the sweep beside whatever else "
           "the machine ran (secondary: train/step_ms is the timing pass's)"),
    Metric("train/tokens_per_s", "higher", "tokens/s", BOTH, "training throughput over the stage"),
    Metric("train/loss", "lower", "nats", BOTH, "the training loss at the evaluation step"),
    Metric("train/ce", "lower", "nats", BOTH, "the draft CE term of the DSpark loss (Eq 9)"),
    Metric("train/tv", "lower", "L1", BOTH, "the TV term of the DSpark loss (Eq 10)", degenerate_in=_TF_DEGENERATE),
    Metric("train/conf", "lower", "nats", BOTH, "the confidence BCE term (Eq 11)", degenerate_in=_TF_DEGENERATE),
    Metric("train/tau_tf", "higher", "tokens", BOTH, "teacher-forced tau on the training batch",
           degenerate_in=_TF_DEGENERATE),
    Metric("train/lm_ce", "lower", "nats", ("backbone",), "the LM's own CE in the joint loss"),
    Metric("tf/tau", "higher", "tokens", BOTH, "teacher-forced tau on validation blocks, aligned frame",
           degenerate_in=_TF_DEGENERATE, headline=True),
    Metric("tf/accept@k", "higher", "probability", BOTH, "teacher-forced acceptance of slot k (mean c*)",
           degenerate_in=_TF_DEGENERATE),
    Metric("tf/ce", "lower", "nats", BOTH, "draft CE on validation blocks", degenerate_in=_TF_DEGENERATE),
    Metric("tf/tv", "lower", "L1", BOTH, "draft-target L1 distance on validation blocks",
           degenerate_in=_TF_DEGENERATE),
    Metric("tf/conf", "lower", "nats", BOTH, "confidence BCE on validation blocks", degenerate_in=_TF_DEGENERATE),
    Metric("tf/conf_ece", "lower", "probability", BOTH, "confidence ECE against c*", degenerate_in=_TF_DEGENERATE),
    Metric("tf/conf_brier", "lower", "probability^2", BOTH, "confidence Brier score against c*",
           degenerate_in=_TF_DEGENERATE),
    Metric("tf/conf_auroc", "higher", "probability", BOTH, "confidence AUROC against c* > 0.5",
           degenerate_in=_TF_DEGENERATE),
    Metric("spec/tau", "higher", "tokens", DRAFTER,
           "mean tokens committed per speculative round at temperature 1, bonus included", headline=True,
           mean_of_items=True),
    Metric("spec/tau_se", "", "tokens", DRAFTER, "standard error of spec/tau over the run's prompts"),
    Metric("spec/tau_p10", "higher", "tokens", DRAFTER,
           "10th percentile of the per-prompt tau: how the run's hardest prompts fare"),
    Metric("spec/tau_greedy", "higher", "tokens", DRAFTER, "spec/tau with greedy decoding"),
    Metric("spec/accept@k", "higher", "probability", DRAFTER,
           "conditional acceptance of slot k, over rounds whose slots 1..k-1 were accepted (Fig 2)",
           curve="per-slot acceptance"),
    Metric("spec/accept_rate@k", "higher", "probability", DRAFTER,
           "unconditional acceptance: the fraction of rounds whose slots 1..k were all accepted"),
    Metric("spec/speedup", "higher", "ratio", DRAFTER,
           "wall-clock tokens/s against autoregressive decoding of the same target, temperature 1, timed by the "
           "interleaved timing pass (`trials time`) on the prompts it names (timing/prompts)", timed=True,
           break_even=1.0,
           below="speculative decoding is slower than autoregressive decoding in every arm here: at CPU scale a "
                 "verify pass costs about 1.4 autoregressive steps and the drafter 0.7, more than these drafters' "
                 "accepted tokens pay for (docs/performance.md)"),
    Metric("spec/speedup_sweep", "higher", "ratio", DRAFTER,
           "spec/speedup timed inside the sweep's final evaluation, beside whatever else the machine ran "
           "(secondary)"),
    Metric("spec/speedup_greedy", "higher", "ratio", DRAFTER,
           "spec/speedup_sweep with greedy decoding (timed inside the sweep, secondary)"),
    Metric("timing/rounds", "", "rounds", BOTH, "rounds of the timing pass behind the run's timed responses"),
    Metric("timing/prompts", "", "prompts", DRAFTER, "prompts each round of the timing pass decoded both ways"),
    Metric("timing/steps", "", "steps", ("backbone",), "training steps each round of the timing pass timed"),
    Metric("spec/tokens_per_s", "higher", "tokens/s", DRAFTER, "speculative decoding throughput"),
    Metric("spec/ar_tokens_per_s", "", "tokens/s", DRAFTER, "the autoregressive baseline's throughput"),
    Metric("spec/round_ms", "lower", "ms", DRAFTER, "wall time of one speculative round"),
    Metric("spec/draft_ms", "lower", "ms", DRAFTER, "the drafter's parallel forward per round"),
    Metric("spec/seq_ms", "lower", "ms", DRAFTER, "the sequential head's sampling loop per round"),
    Metric("spec/seq_frac", "lower", "fraction", DRAFTER, "the sequential loop's share of a round"),
    Metric("spec/verify_ms", "lower", "ms", DRAFTER, "the target's verification pass per round"),
    Metric("conf/ece_mean", "lower", "probability", DRAFTER,
           "ECE of the predicted prefix survival, mean over slots (DeepSpec's per-position mean)"),
    Metric("conf/auroc_mean", "higher", "probability", DRAFTER, "AUROC of the predicted prefix survival, mean over slots"),
    Metric("conf/brier_mean", "lower", "probability^2", DRAFTER, "Brier score of the predicted prefix survival, mean over slots"),
    Metric("conf/ece", "lower", "probability", DRAFTER, "ECE pooled over every (round, slot) record"),
    Metric("conf/auroc", "higher", "probability", DRAFTER, "AUROC pooled over every (round, slot) record"),
    Metric("conf/brier", "lower", "probability^2", DRAFTER, "Brier score pooled over every (round, slot) record"),
    Metric("conf/ece@k", "lower", "probability", DRAFTER, "ECE of slot k's predicted prefix survival"),
    Metric("conf/auroc@k", "higher", "probability", DRAFTER, "AUROC of slot k's predicted prefix survival"),
    Metric("conf/brier@k", "lower", "probability^2", DRAFTER, "Brier score of slot k's predicted prefix survival"),
    Metric("sched/verified@t", "", "tokens", DRAFTER, "tokens verified per round, calibrated threshold t (Fig 5)"),
    Metric("sched/accepted@t", "higher", "tokens", DRAFTER, "tokens accepted per round, calibrated threshold t"),
    Metric("sched/static_verified@t", "", "tokens", DRAFTER, "tokens verified per round, DeepSpec's static rule"),
    Metric("sched/static_accepted@t", "higher", "tokens", DRAFTER, "tokens accepted per round, static rule"),
    Metric("sched/alg1_throughput", "higher", "tokens/step", DRAFTER, "Algorithm 1's throughput over 4 requests"),
    Metric("sched/full_throughput", "higher", "tokens/step", DRAFTER, "full verification's throughput over 4 requests"),
    Metric("sched/alg1_gain", "higher", "ratio", DRAFTER, "Algorithm 1 against full verification"),
    Metric("sched/alg1_tokens_per_step", "higher", "tokens", DRAFTER, "tokens per step under Algorithm 1"),
    Metric("sched/full_tokens_per_step", "higher", "tokens", DRAFTER, "tokens per step under full verification"),
    Metric("sched/alg1_len", "", "tokens", DRAFTER, "mean verified length Algorithm 1 chose"),
    Metric("sched/accepted@budget", "higher", "tokens", DRAFTER,
           "accepted draft tokens per round at a matched verification budget (`@budget2`: 2 draft tokens "
           "verified per round on average), the survival threshold chosen to meet it: the head's ranking"),
    Metric("sched/alg1_throughput@R", "higher", "tokens/s", DRAFTER,
           "Algorithm 1's throughput over R concurrent requests (`@R64`) replayed from the recorded rounds on "
           "the run's named capacity curve (`sched_curve`): ranking and calibration together",
           degenerate_when=ALG1_FLAT),
    Metric("sched/alg1_len@R", "", "tokens", DRAFTER, "mean verified length Algorithm 1 chose over R requests"),
    Metric("sched/alg1_fixed@R", "", "flag", DRAFTER,
           "1 when Algorithm 1 gave every request of every batch of R the same length (a degenerate curve: "
           "the lengths did not follow the confidences, so sched/alg1_throughput@R measures acceptance alone)"),
    Metric("split/prompts", "", "prompts", DRAFTER, "prompts decoded by the run's (latest) speculative evaluation",
           raised_by="spec_prompts", item_seconds="split/decode_s_per_prompt"),
    Metric("split/timed_prompts", "", "prompts", DRAFTER,
           "prompts that evaluation decoded both ways for spec/speedup_sweep (at most 16)"),
    Metric("split/decode_s_per_prompt", "", "s", DRAFTER, "that evaluation's wall time per prompt, every phase"),
    Metric("split/eval_batches", "", "batches", BOTH,
           "held-out batches behind the run's (latest) teacher-forced evaluation (val/bpb and tf/*)",
           raised_by="eval_batches"),
    Metric("split/<response>@g", "", "", DRAFTER,
           "a prompt-derived response on prompt group g alone (prompt i in group i mod 4): the older "
           "evaluations' record of their own noise, valid for mean responses only"),
    Metric("jack/<response>@g", "", "", BOTH,
           "an evaluation-derived response recomputed without evaluation group g (delete-a-group jackknife "
           "over prompts, or over held-out batches): the evaluation's share of the noise, for any response; kept, "
           "with every split/ record, in the run's items.json, not as metrics"),
    Metric("jack/<response>@n", "", "items", BOTH,
           "the items (prompts, or held-out batches) that response's jackknife was formed from, in items.json"),
    Metric("target/loss", "lower", "nats", DRAFTER, "the shared target's training loss"),
    Metric("target/tokens_per_s", "higher", "tokens/s", DRAFTER, "the shared target's training throughput"),
)



def _items_of(m: Metric) -> str:
    """Which of the run's evaluation counts a row's items are drawn on: the timing pass's
    prompts for a timed drafter response, the decoded prompts for the speculative evaluation's
    (spec/, conf/, sched/), the held-out batches for the teacher-forced and LM responses."""
    if m.timed:
        return "timing/prompts" if m.stages == DRAFTER else ""
    if m.stages == DRAFTER and m.name.startswith(("spec/", "conf/", "sched/")):
        return "split/prompts"
    return "split/eval_batches" if m.better and m.name.startswith(("val/", "tf/")) else ""


REGISTRY = tuple(replace(m, items=_items_of(m)) if not m.items else m for m in REGISTRY)
_BY_NAME = {m.name: m for m in REGISTRY}
_SUFFIX = re.compile(r"@[^/@]+$")

# The responses a report analyses by default, per stage, primary first (what the
# question of that stage is about; see README "Two questions").
DEFAULT_RESPONSES = {
    "backbone": ("val/bpb", "train/step_ms"),
    "drafter": ("spec/tau", "spec/tau_greedy", "spec/speedup", "conf/ece_mean", "conf/auroc_mean",
                "conf/brier_mean", "sched/accepted@budget2", "sched/alg1_throughput@R64", "tf/tau"),
}
HEADLINE = tuple(m.name for m in REGISTRY if m.headline)
# DSpark's grouping of an evaluation's items for the jackknife (item i in group i mod G,
# G = min(items, 16)): the engine keeps every group a workload hands over and reads G back
# from them (`trials.store.items`), so the choice is the workload's own.
JACK_GROUPS = 16
TIMED = tuple(m.name for m in REGISTRY if m.timed)


def jack_groups(items: int) -> int:
    """How many groups an evaluation of `items` items forms for its jackknife."""
    return max(0, min(int(items), JACK_GROUPS))


def jackknifed(items: int, without: list[float]) -> dict:
    """A response's items as `report(..., items=)` takes them: {"items": n, "without": the
    response recomputed without each group}."""
    return {"items": int(items), "without": [float(v) for v in without]}


def lookup(name: str) -> Metric | None:
    """The registry row of a metric name, or None for a name it does not know."""
    base = name.replace("_sts", "", 1) if "_sts" in name else name  # conf/ece_mean_sts, conf/ece_sts@2
    if base.startswith("split/") and "@g" in base:
        return _BY_NAME["split/<response>@g"]
    if base.startswith("jack/") and "@g" in base:
        return _BY_NAME["jack/<response>@g"]
    if base.startswith("jack/") and base.endswith("@n"):
        return _BY_NAME["jack/<response>@n"]
    if base in _BY_NAME:
        return _BY_NAME[base]
    m = _SUFFIX.search(base)
    if m:
        suffix = "@k"
        if base.startswith("sched/"):
            suffix = "@budget" if re.fullmatch(r"@budget[0-9.]+", m.group()) else \
                "@R" if re.fullmatch(r"@R[0-9]+", m.group()) else "@t"
        family = base[:m.start()] + suffix
        return _BY_NAME.get(family)
    return None
