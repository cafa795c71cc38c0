"""What `trials.workload_defaults.Loaded` checks when a workload loads: each missing or malformed part in
one line naming the attribute and the fix, before any command works with it."""

import pytest

from trials.workload_defaults import Loaded, TrainContext, WorkloadError


class Core:
    name, config = "core", {"lr": 0.01, "steps": 4}
    metrics = {"val/loss": {"better": "lower", "margin": 0.01}}

    def train(self, config, report):
        report({"val/loss": 1.0})


def test_the_core_four_load_with_no_reevaluation():
    wl = Loaded(Core(), "core")
    assert {"lr", "steps"} <= set(wl.fields) and wl.reeval_counts == {} and not wl.has("reeval")
    assert wl.reeval_problem(None, {"steps": 8}) == ("workload 'core' has no re-evaluation (a `reevaluate` of a "
                                                      "finished trial's checkpoint)")


@pytest.mark.parametrize("extra, says", [
    ({"reevaluate": lambda self, c, k, n: ({}, {})},
     "workload 'core' has `reevaluate` but no reeval_counts: give {config field: what it counts}"),
    ({"reevaluate": lambda self, c, k, n: ({}, {}), "reeval_counts": {"batches": "held-out batches"}},
     "workload 'core': reeval_counts names 'batches', not a config field"),
    ({"metrics": {"val/loss": "smaller"}}, "metrics.val/loss: \"higher\", \"lower\" or {better, margin, unit}"),
    ({"make_config": 3}, "workload 'core': make_config must be a function make_config(values)"),
    ({"variant": "drafter"}, "workload 'core': variant must be a function, got str"),
    ({"shared": type("Half", (), {"needed": lambda self, c: True})()},
     "workload 'core': its shared lacks address, file, read, train, describe, bind (see SharedArtifacts"),
    ({"metric_rows": object()}, "workload 'core': metric_rows lacks lookup, REGISTRY, DEFAULT_RESPONSES"),
    ({"metric_rows": type("Rows", (), {"REGISTRY": (), "DEFAULT_RESPONSES": {}, "lookup": lambda self, n: None})()},
     "workload 'core': metrics names 'val/loss', which its metric_rows lack"),
    ({"metric_rows": type("Rows", (), {
        "REGISTRY": (type("R", (), {"name": "val/loss", "degenerate_when": {"flag": "x"}})(),),
        "DEFAULT_RESPONSES": {}, "lookup": lambda self, n: object()})()},
     "workload 'core': metric_rows' val/loss: degenerate_when: {flag, same, why}, each text"),
    ({"metric_rows": type("Rows", (), {
        "REGISTRY": (type("R", (), {"name": "val/loss", "mean_of_items": "yes"})(),),
        "DEFAULT_RESPONSES": {}, "lookup": lambda self, n: object()})()},
     "workload 'core': metric_rows' val/loss: mean_of_items: true or false, got 'yes'"),
    ({"metric_rows": type("Rows", (), {
        "REGISTRY": (type("R", (), {"name": "val/loss", "items": 3})(),),
        "DEFAULT_RESPONSES": {}, "lookup": lambda self, n: object()})()},
     "workload 'core': metric_rows' val/loss: items: text, got 3"),
    ({"reevaluate": lambda self, c, k, n: ({}, {}), "reeval_counts": {"steps": "evaluation steps"},
      "metric_rows": type("Rows", (), {
          "REGISTRY": (type("R", (), {"name": "split/steps", "raised_by": "lr"})(),),
          "DEFAULT_RESPONSES": {}, "lookup": lambda self, n: object()})()},
     "workload 'core': metric_rows' split/steps: raised_by 'lr' is not a count its reevaluate raises "
     "(reeval_counts: steps)"),
    ({"metric_rows": type("Rows", (), {
        "REGISTRY": (type("R", (), {"name": "split/steps", "raised_by": "steps"})(),),
        "DEFAULT_RESPONSES": {}, "lookup": lambda self, n: object()})()},
     "workload 'core': metric_rows' split/steps: raised_by 'steps' is not a count its reevaluate raises "
     "(reeval_counts: none)"),
])
def test_a_malformed_part_is_named_in_one_line(extra, says):
    obj = type("Bad", (Core,), extra)()
    with pytest.raises(WorkloadError) as e:
        Loaded(obj, "core")
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_optional_parts_are_found_once_as_it_loads_and_train_gets_one_context():
    """The door finds a workload's optional functions when it loads (a part added to the object
    later is not probed for at call time), and `train` gets (config, context): calling the
    context reports, numbered, and it carries where to resume and what to call before a step."""
    seen, reported = [], []

    class Resumable(Core):
        def variant(self, cfg):
            return "one"

        def train(self, config, context):
            context.before_step(1, bool(context.resume_from))
            context({"val/loss": 1.0})
            context({"val/loss": 0.5, "step": 9}, "ckpt-9")
            seen.append(context.resume_from)

    obj = Resumable()
    wl = Loaded(obj, "core")
    assert wl.variant(wl.config({})) == "one" and not wl.has("reeval")
    obj.reevaluate = lambda c, k, n: ({}, {})  # given after the door: not a part of this workload
    obj.objective = lambda c: {"nothing": 0}
    assert not wl.has("reeval") and not wl.has("objective")
    assert wl.config({}).objective_dict() == {"lr": 0.01, "steps": 4}  # every field but the plumbing
    steps = []
    wl.train(wl.config({}), TrainContext(lambda m, c: reported.append((m, c)), "ckpt",
                                         lambda s, r: steps.append((s, r))))
    assert seen == ["ckpt"] and steps == [(1, True)]
    assert reported == [({"step": 1, "val/loss": 1.0}, None), ({"val/loss": 0.5, "step": 9}, "ckpt-9")]
    wl.train(wl.config({}))  # no context: nothing to resume, reports go nowhere, before_step does nothing
    assert seen == ["ckpt", None]


@pytest.mark.parametrize("train, says", [
    (lambda self, config, report, resume_from=None: None, "train's parameter 'resume_from' is never given: it is "
                                                           "`context.resume_from` of train(config, context)"),
    (lambda self, config, context, *, before_step=None: None, "train's parameter 'before_step' is never given"),
    (lambda self, config: None, "train must take (config, context); its signature is train(config)"),
])
def test_a_train_that_would_miss_its_context_is_refused_as_it_loads(train, says):
    obj = type("Old", (Core,), {"train": train})()
    with pytest.raises(WorkloadError) as e:
        Loaded(obj, "core")
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("fields, says", [
    ({"max_replicates": "steps"}, "sequential_fields: 'max_replicates' -> 'steps': max_<kind> (not max_replicates"),
    ({"max_items": "steps"}, "sequential_fields: 'max_items' -> 'steps': max_<kind> (not max_replicates or max_items)"),
    ({"prompts": "steps"}, "sequential_fields: 'prompts' -> 'steps'"),
    ({"max_prompts": "n_prompts"}, "sequential_fields: 'max_prompts' -> 'n_prompts': max_<kind>"),
    (["max_steps"], "sequential_fields must map max_<kind> to a config field"),
])
def test_a_plans_evaluation_maxima_are_checked_as_the_workload_loads(fields, says):
    obj = type("Capped", (Core,), {"sequential_fields": fields})()
    with pytest.raises(WorkloadError) as e:
        Loaded(obj, "core")
    assert says in str(e.value) and "\n" not in str(e.value)
    assert Loaded(type("Fine", (Core,), {"sequential_fields": {"max_steps": "steps"}})(), "core")


def test_a_report_with_items_it_cannot_take_fails_naming_the_response():
    context = TrainContext(lambda m, c: None)
    with pytest.raises(ValueError, match="val/loss"):
        context({"val/loss": 1.0}, items={"val/loss": "not items"})


def test_a_missing_core_attribute_is_named():
    obj = type("NoTrain", (), {"name": "x", "config": {}, "metrics": {}})()
    with pytest.raises(WorkloadError, match="^workload 'x' lacks train: a workload needs name, config, train and metrics"):
        Loaded(obj, "x")


def test_a_reevaluation_gets_the_counts_asked_and_returns_its_files():
    seen = []

    class Reeval(Core):
        reeval_counts = {"steps": "evaluation steps"}

        def reevaluate(self, config, checkpoint, counts):
            seen.append(counts)
            return {"val/loss": 0.5}, {"per_item.json": b"[]"}

    wl = Loaded(Reeval(), "core")
    assert wl.has("reeval") and wl.reeval_problem(None, {"steps": 8}) is None
    assert wl.reevaluate({"lr": 0.1, "steps": 4}, "ckpt", {"steps": 8}) == ({"val/loss": 0.5},
                                                                             {"per_item.json": b"[]"})
    assert seen == [{"steps": 8}]


def test_a_count_named_like_the_commands_option_or_a_nested_file_name_is_refused():
    class Clash(Core):
        config = {"lr": 0.01, "storage": 2}
        reeval_counts = {"storage": "items"}

        def reevaluate(self, config, checkpoint, counts):
            return {}, {}

    with pytest.raises(WorkloadError, match="reeval_counts names 'storage', which `trials reeval` takes as its own"):
        Loaded(Clash(), "core")

    class Nested(Core):
        reeval_counts = {"steps": "evaluation steps"}

        def reevaluate(self, config, checkpoint, counts):
            return {"val/loss": 0.5}, {"sub/x.json": b"{}"}

    with pytest.raises(WorkloadError, match="reevaluate returned the file name 'sub/x.json': a plain name"):
        Loaded(Nested(), "core").reevaluate({}, "ckpt", {"steps": 4})


def test_a_reevaluation_may_hand_over_its_items_as_a_report_does():
    """`reevaluate` -> (metrics, files, items): the items come back as their columns (the
    store diverts them to the run's items.json); a malformed return is refused by name."""
    class WithItems(Core):
        reeval_counts = {"steps": "evaluation steps"}

        def reevaluate(self, config, checkpoint, counts):
            return {"val/loss": 0.5}, {}, {"val/loss": [0.4, 0.6, 0.5, 0.5]}

    metrics, files = Loaded(WithItems(), "core").reevaluate({}, "ckpt", {"steps": 4})
    assert metrics["val/loss"] == 0.5 and metrics["jack/val/loss@n"] == 4.0 and files == {}
    assert metrics["jack/val/loss@g0"] == pytest.approx((0.6 + 0.5 + 0.5) / 3)

    class Bad(WithItems):
        def reevaluate(self, config, checkpoint, counts):
            return {"val/loss": 0.5}

    with pytest.raises(WorkloadError, match="reevaluate returned .* not \\(metrics, files\\)"):
        Loaded(Bad(), "core").reevaluate({}, "ckpt", {"steps": 4})


def test_a_timing_pass_must_say_what_a_repetition_holds_in_the_passs_words():
    class Hooks:
        response = {"": "val/loss"}
        size = {"": "batches"}  # the pass sizes a repetition in prompts or steps only

        def needs_checkpoints(self, variant):
            return False

        arms = values = items = needs_checkpoints

    class Timed(Core):
        timing = Hooks()

    with pytest.raises(WorkloadError, match=r"timing.size maps each timed variant to 'prompts' or 'steps', got"):
        Loaded(Timed(), "core")
    Hooks.size = {"": "steps"}
    assert Loaded(Timed(), "core").timing.size == {"": "steps"}
    del Hooks.values
    with pytest.raises(WorkloadError, match="its timing lacks values"):
        Loaded(Timed(), "core")


def test_dspark_comes_through_the_same_door_with_the_same_configs():
    """DSpark's workload is loaded by the core's code path (its capabilities: make_config,
    metric_rows, roles, objective): every shipped spec's trials get the configs the trainer's
    own `from_dict` builds, value for value (the runs' params and the sweeps' fingerprints do
    not move), its hooks get its own Config, and a bad value is refused in one line."""
    from pathlib import Path

    from dspark.config import Config, from_dict
    from trials import validate
    from trials.workload_config import ConfigView
    from trials.workload import load_workload

    wl = load_workload("dspark")
    assert type(wl) is Loaded and not hasattr(wl, "full") and wl.native_config is Config
    for path in sorted((Path(__file__).resolve().parents[2] / "sweeps").glob("*.yaml")):
        for t in validate.load_spec(path).trials:
            assert isinstance(t.config, ConfigView) and isinstance(t.config.native(), Config)
            assert t.config.to_dict() == from_dict(t.config.to_dict()).to_dict(), (path.name, t.key)
            assert t.config.objective_dict() == t.config.native().objective_dict()
    cfg = wl.config({"preset": "small", "decay_gamma": "block", "block_size": 4})
    assert cfg.d_model == 256 and cfg.context_layers == [1, 3] and cfg.to_dict() == from_dict(
        {"preset": "small", "decay_gamma": "block", "block_size": 4}).to_dict()
    assert cfg.objective_dict()["decay_gamma"] == 4.0  # the workload's own rule: "block" resolves
    assert cfg.replace(out_dir="x").native().out_dir == "x" and cfg.replace(out_dir="x").d_model == 256
    assert wl.variant(cfg) == "drafter" and wl.role("d_model") == "target"
    with pytest.raises(ValueError) as e:
        wl.config({"preset": "small", "block_size": "four"})
    assert "block_size" in str(e.value) and "\n" not in str(e.value)


def test_the_command_that_adds_items_is_the_one_the_counts_row_names():
    """The plan prints the re-evaluation a count's own row says raises it (`raised_by`), a
    user's workload's field as DSpark's; a registry recorded before rows said it prints what the
    workload's current rows say."""
    from analysis.item_kinds import more_items_command
    from trials.registry import from_record, recorded
    from trials.sweep_record import SweepRecord
    from trials.workload import load_workload

    row = {"name": "split/eval_batches", "raised_by": "held_out", "better": ""}
    mine = from_record({"metrics": {"split/eval_batches": row}})
    assert more_items_command("eval_batches", "s", mine) == "reeval s --held-out"
    dspark = load_workload("dspark").registry
    kept = recorded(dspark, ["split/prompts", "split/eval_batches"])
    assert kept["metrics"]["split/prompts"]["raised_by"] == "spec_prompts"
    assert more_items_command("prompts", "s", from_record(kept)) == "reeval s --spec-prompts"
    for r in kept["metrics"].values():  # a record kept before rows declared raised_by
        r.pop("raised_by", None)
    kept.pop("declares")
    assert more_items_command("eval_batches", "s", from_record(kept)) == ""  # no row says it
    old = SweepRecord(workload="dspark", registry=kept).rules()  # read with the workload's current rows
    assert more_items_command("eval_batches", "s", old) == "reeval s --eval-batches"
    assert more_items_command("timing_prompts", "s", dspark) == "time s --prompts"


def test_a_workloads_own_count_is_a_kind_of_items_end_to_end():
    """A user's workload counts its items as `split/examples` (a row's `items`): the statistics
    read it as a kind of its own, in words, raised by its own field, capped by the plan's
    `max_examples`; a look's fingerprint holds it, so more examples are new data. DSpark's
    counts are the engine's own, so its looks' fingerprints are what they were."""
    import pandas as pd

    from analysis.item_kinds import count_column, evaluation_counts, kind_of, more_items_command, what
    from analysis.sequential import Plan, fingerprint, information_fraction
    from trials.registry import from_record
    from trials.workload import load_workload

    rows = {"val/loss": {"name": "val/loss", "better": "lower", "items": "split/examples"},
            "split/examples": {"name": "split/examples", "raised_by": "n_examples"}}
    mine = from_record({"metrics": rows})
    assert kind_of("val/loss", mine) == "examples" and what("examples") == "examples"
    assert count_column("val/loss", mine) == "split/examples"
    assert more_items_command("examples", "s", mine) == "reeval s --n-examples"
    unraised = from_record({"metrics": {**rows, "split/examples": {"name": "split/examples"}}})
    assert more_items_command("examples", "s", unraised) == ""  # no row says what raises it: no command guessed
    runs = pd.DataFrame({"cell": ["a", "b"], "replicate": [0, 0], "val/loss": [1.0, 2.0], "split/examples": [50, 50]})
    counts = evaluation_counts(runs.columns, mine)
    assert counts == {"examples": "split/examples"}
    key, _, evaluation = fingerprint(runs, counts)
    assert evaluation == {"examples": 50.0}
    assert fingerprint(runs.assign(**{"split/examples": 200}), counts)[0] != key  # re-evaluated: new data
    t = information_fraction(Plan(4, 0.05, max_examples=200), 2, evaluation, {"val/loss": ("examples", 0.5)})
    assert t == pytest.approx(0.5 * (0.5 + 0.5 * 50 / 200), abs=0.005)
    dspark = load_workload("dspark").registry
    names = ["spec/tau", "val/bpb", "split/prompts", "split/eval_batches", "split/decode_s_per_prompt"]
    assert evaluation_counts(names, dspark) == {}  # the engine's own columns: fingerprints as before


def test_what_an_item_costs_is_the_column_the_counts_row_names():
    """A plan prices more prompts by the seconds per item its count's row names (`item_seconds`):
    a user's workload's column as DSpark's; a registry recorded before rows said it, by the
    workload's current rows."""
    from analysis.item_kinds import seconds_column
    from trials.registry import from_record, recorded
    from trials.sweep_record import SweepRecord
    from trials.workload import load_workload

    row = {"name": "split/prompts", "item_seconds": "eval/s_per_prompt", "better": ""}
    assert seconds_column("prompts", from_record({"metrics": {"split/prompts": row}})) == "eval/s_per_prompt"
    kept = recorded(load_workload("dspark").registry, ["split/prompts"])
    assert kept["metrics"]["split/prompts"]["item_seconds"] == "split/decode_s_per_prompt"
    kept["metrics"]["split/prompts"].pop("item_seconds")
    kept.pop("declares")
    assert seconds_column("prompts", from_record(kept)) == ""  # read as recorded: no row says it
    old = SweepRecord(workload="dspark", registry=kept).rules()
    assert seconds_column("prompts", old) == "split/decode_s_per_prompt"
    assert seconds_column("eval_batches", old) == ""  # nothing prices a held-out batch
    with pytest.raises(ValueError, match="registry.metrics.split/prompts"):
        from_record({"metrics": {"split/prompts": {**row, "item_seconds": 3}}})


def test_a_plan_prices_every_kind_of_item_whose_row_says_what_one_costs():
    """The plan's header prices each evaluation kind whose count's row names the seconds one
    item costs (`item_seconds`), the engine's kinds first, then a workload's own (its words,
    one item in the singular): not DSpark's prompts alone."""
    import pandas as pd

    from analysis.plan import item_prices
    from trials.registry import from_record

    rows = {"split/prompts": {"name": "split/prompts", "item_seconds": "eval/s_per_prompt"},
            "split/eval_batches": {"name": "split/eval_batches", "item_seconds": "eval/s_per_batch"},
            "split/examples": {"name": "split/examples", "item_seconds": "eval/s_per_example"},
            "val/loss": {"name": "val/loss", "better": "lower", "items": "split/examples"}}
    rules = from_record({"metrics": rows})
    runs = pd.DataFrame({"split/prompts": [8, 8], "eval/s_per_prompt": [1.0, 3.0], "split/eval_batches": [4, 4],
                         "eval/s_per_batch": [0.5, 0.5], "split/examples": [50, 50], "eval/s_per_example": [0.2, 0.2],
                         "val/loss": [1.0, 1.1]})
    assert item_prices(runs, rules) == (", prompts at 2 s per prompt per run, held-out batches at 0.5 s per item "
                                        "per run, examples at 0.2 s per example per run")  # no guessed singular
    assert item_prices(runs.drop(columns=["eval/s_per_prompt", "eval/s_per_batch"]), rules) == \
        ", examples at 0.2 s per example per run"  # a kind priced only where the runs hold its seconds
    assert item_prices(runs, from_record({"metrics": {"val/loss": rows["val/loss"]}})) == ""  # no row says a price
