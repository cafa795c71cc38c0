"""`trials`: run, resume, inspect, time and validate factorial sweeps of a workload."""

from __future__ import annotations

import argparse
import os
import re
import sys

from . import expand, saved, spec as specmod, validate
from trials.timing.timing_pass import SIGTERMED, Terminated, stop_on_sigterm, time_sweep
from trials.timing.timing_settings import TimingSettings, TimingSettings as S
from .augment import AugmentSettings, augment
from .listing import cmd_list, cmd_status
from .recover import recover
from .lease import Lease
from .run_settings import RunSettings
from .spec_summary import cmd_validate, never_decides, own_error_line
from trials.store.client import (DEFAULT_TRACKING_URI, STORE_RETRY_S, STORE_TIMEOUT_S, absolute_uri, retrying,
                                 run_command, tracking_client)
from trials.store.ui import exact_options, mlflow_link
from trials.store.probe import probe_store
from trials.store.keys import TRIAL_KEY_TAG, sweep_trials


def _run(spec, settings: RunSettings, ui: str | None = None) -> int:
    """Run or resume; an interrupted sweep exits 128 + the signal (130 SIGINT, 143
    SIGTERM) and says how to resume it."""
    from trials import runner
    from trials.driver import stopping

    uri, storage = settings.tracking_uri, settings.storage
    try:
        result = runner.run(spec, settings)
    except stopping.Interrupted as e:
        root = saved.storage_root(storage)
        print(f"trials: {spec.name} interrupted ({e}); no run is left RUNNING. Resume it with:\n"
              f"  trials resume {spec.name} --storage {root} --tracking-uri {uri}", file=sys.stderr)
        return _exit_interrupted(e)
    except stopping.StoreStopped as e:
        root = saved.storage_root(storage)
        full = isinstance(e, stopping.StorageStopped)
        kept = "the store holds every point so far" if full else "Tune's result files hold what the store missed"
        left = ("No run is left RUNNING" if e.closed else
                "The runs the store could not close stay RUNNING until the resume below closes them,")
        print(f"trials: error: {e}\n{left} and {kept}. Once "
              f"{'there is room again' if full else 'the store answers'}, resume with:\n"
              f"  trials resume {spec.name} --storage {root} --tracking-uri {uri}", file=sys.stderr)
        return 3

    from trials.driver.progress import arms_table, failure_lines

    client = tracking_client(uri)
    # read like the sweep wrote: a store briefly locked or down is retried, not a traceback
    found = retrying(lambda: sweep_trials(client, result["experiment_id"]),
                     settings.store_retry_s, what="reading the sweep's runs")
    table = arms_table(spec, {r.data.tags[TRIAL_KEY_TAG]: r for r in found})
    print(f"\n{spec.name}: {result['finished']} finished, {result['failed']} failed of {len(spec.trials)} trials"
          + (f"; mean per arm:\n{table}" if table else ""))
    if result.get("stopped_early"):  # the one cause, said once, with a run that shows it
        print(f"{spec.name}: {result['stopped_early']}")
    else:
        for line in failure_lines(spec, {r.data.tags[TRIAL_KEY_TAG]: r for r in found}):
            print(line)
    print(mlflow_link(uri, result.get("experiment_id", "?"), result.get("parent_run_id", "?"), ui))
    return 0 if result["failed"] == 0 and not result.get("stopped_early") else 1


def cmd_run(args) -> int:
    spec = validate.load_spec(args.spec)  # the whole spec is validated before anything starts
    if args.smoke_test:
        spec = expand.smoke(spec)
    if never_decides(spec):  # said when declared, before any work: the study is a screening of estimates only
        print(f"trials: note: {spec.name}: {own_error_line(spec)}")
    if args.local:
        return _run_local(spec, args)
    if args.out:
        raise ValueError("--out: only with --local (a Ray sweep writes to MLflow; `analysis export` makes a parquet)")
    return _run(spec, RunSettings(tracking_uri=absolute_uri(args.tracking_uri), storage=args.storage,
                                  address=args.address, max_concurrent=args.max_concurrent,
                                  resource_wait_s=args.resource_wait, store_timeout_s=args.store_timeout,
                                  store_retry_s=args.store_retry, verbose=1 + args.verbose), ui=args.ui_url)


def _run_local(spec, args) -> int:
    """One machine, torch alone: no Ray, no MLflow; the results go to a parquet."""
    from .local import run_local

    if not args.out:
        raise ValueError("--local: give --out PATH.parquet for the results")
    done = len(run_local(spec, args.out, args.storage, deadline_s=args.deadline_s).runs)
    print(f"{spec.name}: {done} of {len(spec.trials)} trials in {args.out}; attribute them with:\n"
          f"  analysis report {spec.name} --parquet {args.out}")
    return 0 if done == len(spec.trials) else 1


def cmd_resume(args) -> int:
    spec, meta = saved.load_saved(args.name, args.storage)
    uri = args.tracking_uri or meta["tracking_uri"]
    return _run(spec, RunSettings(tracking_uri=uri, storage=args.storage, address=args.address,
                                  max_concurrent=meta.get("max_concurrent"), resume=True,
                                  resource_wait_s=args.resource_wait, store_timeout_s=args.store_timeout,
                                  store_retry_s=args.store_retry, verbose=1 + args.verbose), ui=args.ui_url)


def cmd_recover(args) -> int:
    """Rebuild a sweep's MLflow records from Tune's result files in storage."""
    spec, meta = saved.load_saved(args.name, args.storage, "recover")
    uri = absolute_uri(args.tracking_uri or meta["tracking_uri"])
    probe_store(uri, args.store_timeout, writable=True)
    exp_dir = saved.storage_root(args.storage) / spec.name
    with Lease(exp_dir, spec.name, f"trials recover {spec.name}"):
        out = recover(spec, exp_dir, uri)
    print(f"{spec.name}: {out['runs']} run(s) rebuilt in {uri} ({out['points']} metric points logged, "
          f"{out['kept']} later record(s) replayed: re-evaluations, timing passes, looks); "
          f"{out['done']} of {out['trials']} trials finished"
          + ("" if out["done"] == out["trials"] else f"; resume the rest with: trials resume {spec.name}"))
    return 0


def _exit_interrupted(e) -> int:
    """128 + the signal. Where the signal also stopped the local Ray (SIGTERM to the process
    group), exit now: Ray's exit handler would wait a minute on its dead GCS, then abort."""
    code = 128 + e.signum
    if getattr(e, "ray_lost", False):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def cmd_augment(args) -> int:
    """More replicate blocks, or looks until every primary term is decided."""
    from trials.driver import stopping

    try:
        asked = AugmentSettings(replicates=args.replicates, until_decided=args.until_decided,
                                look_every=args.look_every, max_replicates=args.max_replicates,
                                budget_minutes=args.budget_minutes, alpha=args.alpha, post_hoc=args.post_hoc)
        out = augment(args.name, args.storage, args.tracking_uri, args.address, settings=asked)
    except stopping.Interrupted as e:
        # the same command continues to the blocks it asked for (trials.augment), adding none beyond them
        every = f" --look-every {args.look_every}" if args.look_every else ""
        again = (f"trials augment {args.name} --until-decided{every}" if args.until_decided
                 else f"trials augment {args.name} --replicates {args.replicates}")
        print(f"trials: augment of {args.name} interrupted ({e}); no run is left RUNNING. Continue it with:\n"
              f"  {again} --storage {saved.storage_root(args.storage)}", file=sys.stderr)
        return _exit_interrupted(e)
    print(f"{args.name}: {out['stopped']} ({out['replicates']} replicate blocks)")
    return 0 if out["ok"] else 1


def cmd_reeval(args) -> int:
    """The final evaluation again with more items (the workload's `reeval_counts`), from each
    finished trial's checkpoint."""
    from .reeval import flag, reeval

    counts = dict(args.counts)
    said = " ".join(f"{flag(field)} {n}" for field, n in counts.items())
    try:
        out = reeval(args.name, args.storage, counts, tracking_uri=args.tracking_uri, address=args.address)
    except KeyboardInterrupt:
        print(f"trials: reeval of {args.name} interrupted; the trials done so far are kept. Continue with:\n"
              f"  trials reeval {args.name} {said} "
              f"--storage {saved.storage_root(args.storage)}", file=sys.stderr)
        return 130
    print(f"{args.name}: {out['done']} trial(s) re-evaluated ({said}), {out['skipped']} already were")
    if out["refused"]:
        print(f"{args.name}: {len(out['refused'])} trial(s) recorded nothing (their evaluation is unchanged, and the "
              f"same command asks them again): " + "; ".join(out["refused"][:3])
              + (f"; and {len(out['refused']) - 3} more" if len(out["refused"]) > 3 else ""), file=sys.stderr)
        return 1
    return 0


def count_flags(parser, argv: list[str]) -> tuple[list[str], list[tuple[str, int]]]:
    """`trials reeval`'s counts taken out of its arguments: each `--FIELD N` or `--FIELD=N` that
    is not one of the command's own options (FIELD a config field, `_` written `-`; which
    fields the workload counts is checked once its sweep is loaded). Returns the rest and
    the counts, in order."""
    own = {o for action in parser._actions for o in action.option_strings if o.startswith("--")}
    rest, counts, i = [], [], 0
    while i < len(argv):
        token = argv[i]
        name, eq, value = token.partition("=")
        if not token.startswith("--") or len(name) < 3 or any(o.startswith(name) for o in own):  # argparse's own
            rest.append(token)                                                                  # (abbreviated too)
            i += 1
            continue
        if not eq:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                parser.error(f"argument {name}: expected one argument")
            value, i = argv[i + 1], i + 1
        i += 1
        try:
            n = int(value)
        except ValueError:
            parser.error(f"argument {name}: invalid int value: {value!r}")
        field = name[2:].replace("-", "_")
        if field in dict(counts):
            parser.error(f"argument {name}: given twice")
        counts.append((field, n))
    return rest, counts


def cmd_time(args) -> int:
    """The interleaved timing pass of every finished trial (the timed responses)."""
    settings = TimingSettings(rounds=args.rounds, warmup=args.warmup, prompts=args.prompts, steps=args.steps,
                              seed=args.seed)
    stop_on_sigterm()  # from here: the pass sets it again after ray.init, which sets its own
    try:
        out = time_sweep(args.name, args.storage, args.tracking_uri, args.address, settings, again=args.again)
    except KeyboardInterrupt as e:
        if getattr(e, "recorded", False):
            print(f"trials: timing pass of {args.name} stopped by a SIGTERM after it was recorded whole; nothing is "
                  f"lost (analysis report {args.name} reads it)", file=sys.stderr)
            return 143
        print(f"trials: timing pass of {args.name} interrupted; nothing was recorded. Run it again with:\n"
              f"  trials time {args.name} --storage {saved.storage_root(args.storage)}", file=sys.stderr)
        return 143 if isinstance(e, Terminated) or SIGTERMED else 130
    if out is None:  # every run timed already: said
        return 0
    print(f"{args.name}: {out['response']} of {len(out['values'])} run(s) from {out['rounds']} interleaved rounds "
          f"on {out['node']} in {out['seconds']:.0f} s (pass {out['id']})")
    return 0


def _store_flags(p: argparse.ArgumentParser, retry: bool = True) -> None:
    p.add_argument("--store-timeout", type=float, default=STORE_TIMEOUT_S,
                   help="seconds the tracking store has to answer before any work starts")
    if retry:
        p.add_argument("--store-retry", type=float, default=STORE_RETRY_S,
                       help="seconds a sweep retries a failing store write before it stops cleanly")


def _verbose_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="-v: a line per started trial and per evaluation too; -vv: Tune's own output as well "
                        "(default: a line per finished trial, and one on what runs after a minute without one)")


def _ui_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ui-url", help="the MLflow UI's address for the links printed (none: the tracking server "
                                    "itself, or http://127.0.0.1:5000 where `mlflow ui` serves a file store)")


FMT = argparse.ArgumentDefaultsHelpFormatter
STORAGE_HELP = "Tune storage folder (shared on a cluster)"


ADDRESS_HELP = ("the Ray cluster: auto (the one `ray start` runs on this node, as inside `ray job submit`) "
                "or its GCS address HOST:PORT (none: a new local Ray of this sweep's own)")


def ray_address(text: str) -> str:
    """--address as users type it, checked before any work: `auto` or HOST:PORT (the GCS
    port `ray start --head --port` names). A Ray Client address (ray://) and the dashboard's
    http:// address are refused with what to type instead."""
    if text == "auto":
        return text
    if text.startswith("ray://"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: Ray Client (ray://) is not supported, because the sweep's driver needs the shared "
            "storage; run it on the cluster with `ray job submit ... -- trials run ... --address auto`")
    if text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a dashboard address, for `ray job submit --address`; give the GCS address "
            "HOST:PORT (`ray start --head --port`, 6379 by default) or auto")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or not re.fullmatch(r"[\w.\-\[\]:]+", host):
        raise argparse.ArgumentTypeError(f"{text!r}: expected auto or HOST:PORT, such as 10.0.0.5:6379")
    return text


def _named(sub, command: str, help: str, fn, address: bool = True, uri_help: str | None = None):
    """A subcommand on a sweep in storage: its name, the store, the storage (and the Ray)."""
    p = sub.add_parser(command, help=help, formatter_class=FMT)
    p.add_argument("name", help="the sweep's name")
    if address:
        p.add_argument("--address", type=ray_address, help=ADDRESS_HELP)
    p.add_argument("--tracking-uri", help=uri_help or "MLflow store (none: the one saved with the sweep)")
    p.add_argument("--storage", default="ray_results", help=STORAGE_HELP)
    p.set_defaults(fn=fn)
    return p


def _add_run(sub) -> None:
    r = sub.add_parser("run", help="run a sweep spec", formatter_class=FMT)
    r.add_argument("spec", help="the sweep spec (YAML)")
    r.add_argument("--address", type=ray_address, help=ADDRESS_HELP)
    r.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="MLflow store (a relative sqlite "
                   "path is made absolute and saved with the sweep)")
    r.add_argument("--storage", default="ray_results", help=STORAGE_HELP)
    r.add_argument("--max-concurrent", type=int, help="trials at once (none: the spec's max_concurrent)")
    r.add_argument("--smoke-test", action="store_true", help="every trial shrunk to a few steps, as <name>-smoke")
    r.add_argument("--local", action="store_true",
                   help="one machine, torch alone (no Ray, no MLflow): trials in run order, results to --out")
    r.add_argument("--out", help="with --local: the parquet to write after each trial (rerun: skips those in it)")
    r.add_argument("--deadline-s", type=float,
                   help="with --local: stop before a trial that would not finish within this many seconds")
    r.add_argument("--resource-wait", type=float, default=600.0,
                   help="on a cluster (--address), seconds to wait for a node that can hold one trial's "
                        "resources before stopping (a local Ray is refused at once)")
    _store_flags(r)
    _ui_flag(r)
    _verbose_flag(r)
    r.set_defaults(fn=cmd_run)


def _add_augment(sub) -> None:
    a = _named(sub, "augment", "add replicate blocks, or look until every primary term is decided", cmd_augment)
    how = a.add_mutually_exclusive_group(required=True)
    how.add_argument("--replicates", type=int, help="add this many replicate blocks and run them")
    how.add_argument("--until-decided", action="store_true",
                     help="look, then add one block (or the plan's look_every), until every primary term is decided "
                          "(alpha spending)")
    a.add_argument("--look-every", type=int,
                   help="blocks added between looks, for a plan that names none (sequential.look_every; none: 1)")
    a.add_argument("--max-replicates", type=int,
                   help="the most blocks the looks may reach, for a sweep whose spec declares no plan (none: 3x the "
                        "sweep's)")
    a.add_argument("--budget-minutes", type=float, help="stop before a block that would pass this (none: no budget)")
    a.add_argument("--alpha", type=float, default=0.05, help="the alpha spent over all looks")
    a.add_argument("--post-hoc", action="store_true",
                   help="add a sequential plan to a sweep already analysed without one (every report says so)")


def _add_time(sub) -> None:
    t = _named(sub, "time", "time each finished trial's timed responses (the workload's `timed` metrics) once, "
               "a block's arms in interleaved rounds on one node", cmd_time)
    t.add_argument("--rounds", type=int, default=S.rounds,
                   help="rounds (>= 3: with 2 a busy round cannot be told from the other); every run once per round, in a fresh random order")
    t.add_argument("--warmup", type=int, default=S.warmup,
                   help="untimed repetitions of a run just before its timed one, every round")
    t.add_argument("--prompts", type=int, default=S.prompts,
                   help="drafter stage: prompts a repetition decodes speculatively and autoregressively")
    t.add_argument("--steps", type=int, default=S.steps, help="backbone stage: training steps a repetition times")
    t.add_argument("--seed", type=int, default=S.seed,
                   help="seeds each round's order (with the round) and the backbone's batches")
    t.add_argument("--again", action="store_true",
                   help="time every finished run again (a pass a load spoiled), not only blocks not timed yet")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trials", description=__doc__, formatter_class=FMT)
    sub = p.add_subparsers(dest="command", required=True)
    _add_run(sub)
    s = _named(sub, "resume", "resume an interrupted sweep by name", cmd_resume)
    s.add_argument("--resource-wait", type=float, default=600.0,
                   help="on a cluster, seconds to wait for a node that fits a trial")
    _store_flags(s)
    _ui_flag(s)
    _verbose_flag(s)
    _store_flags(_named(sub, "recover", "rebuild a sweep's MLflow records from Tune's result files in storage",
                        cmd_recover, address=False,
                        uri_help="MLflow store to rebuild in (none: the one saved with the sweep)"), retry=False)
    _add_augment(sub)
    rv = _named(sub, "reeval", "re-run every finished trial's final evaluation with more items (prompts, batches)",
                cmd_reeval)
    rv.usage = "trials reeval NAME --FIELD N [--FIELD N ...] [options]"
    rv.epilog = ("counts: each --FIELD N raises one of the workload's re-evaluation counts (`reeval_counts`, "
                 "config fields with _ written -) to N >= 2; a flag the workload does not name is refused, "
                 "naming those it has.")
    _add_time(sub)
    _store_flags(_named(sub, "status", "cells finished / running / failed / pending", cmd_status, address=False),
                 retry=False)
    ls = sub.add_parser("list", help="the sweeps in a storage folder, or in a store, and their state",
                        formatter_class=FMT)
    ls.add_argument("--storage", default="ray_results", help=STORAGE_HELP)
    ls.add_argument("--tracking-uri", help="list the sweeps recorded in this MLflow store instead")
    _ui_flag(ls)
    ls.set_defaults(fn=cmd_list)
    v = sub.add_parser("validate", help="validate a spec and print its alias structure", formatter_class=FMT)
    v.add_argument("spec", help="the sweep spec (YAML)")
    v.add_argument("--address", type=ray_address, help="the Ray cluster it will run on, as for run (none: this "
                   "machine, whose cores, GPUs and CUDA devices are checked now)")
    v.set_defaults(fn=cmd_validate)
    exact_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    argv, parser, counts = list(sys.argv[1:] if argv is None else argv), build_parser(), []
    if argv[:1] == ["reeval"]:  # the workload's counts, known once its sweep loads
        reeval_parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["reeval"]
        rest, counts = count_flags(reeval_parser, argv[1:])
        argv = ["reeval", *rest]
    args = parser.parse_args(argv)
    args.counts = counts
    spec_problems = (specmod.SpecError, 2, lambda e: [f"error: {line}" for line in e.problems])
    return run_command("trials", lambda: args.fn(args), getattr(args, "tracking_uri", None), (spec_problems,))


if __name__ == "__main__":
    sys.exit(main())
