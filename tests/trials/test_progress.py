"""The end-of-sweep table (`trials.driver.progress.arms_table`): arms sorted, means of the shown
responses, and a timed response that no pass has measured yet named with its command."""

from types import SimpleNamespace

from trials.driver.progress import arms_table
from trials.validate import parse


def test_the_arms_table_is_sorted_and_names_the_timing_pass():
    spec = parse({"name": "arms", "base": {"preset": "tiny"}, "replicates": 2,
                  "factors": {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}}},
                  "responses": {"spec/tau": {"margin": 0.1}, "spec/speedup": {"margin": 0.05}}})
    runs = {t.key: SimpleNamespace(info=SimpleNamespace(status="FINISHED"),
                                   data=SimpleNamespace(metrics={"spec/tau": 2.0 + t.replicate}))
            for t in spec.trials}
    lines = arms_table(spec, runs).splitlines()
    assert [ln.split()[0] for ln in lines[1:3]] == ["aligned", "shifted"]
    assert lines[1].split()[1:3] == ["2", "2.5"]  # two runs, mean of 2.0 and 3.0
    assert lines[-1] == "(spec/speedup: measured by the interleaved timing pass, `trials time arms`)"
    for r in runs.values():
        r.data.metrics["spec/speedup"] = 1.1
    assert "trials time" not in arms_table(spec, runs)


def test_time_left_schedules_what_remains_on_the_slots():
    from trials.driver.progress import time_left

    nan = time_left(100.0, [], [90.0], 3, 2)
    assert nan != nan  # nothing finished: no measured time per trial, no estimate
    # median 10 s; two slots: the running trial (4 s in) needs 6 more, then 3 pending trials of 10
    # go to whichever slot frees first: 0+10, 6+10, 10+10 -> the last ends at 20
    assert time_left(100.0, [9.0, 10.0, 30.0], [96.0], 3, 2) == 20.0
    # a running trial older than the median is taken to be ending now
    assert time_left(100.0, [10.0], [50.0], 0, 1) == 0.0
    # one slot: everything in a row
    assert time_left(100.0, [10.0], [95.0], 2, 1) == 25.0


def test_the_progress_lines_say_finished_trials_and_what_runs_after_a_silence(monkeypatch):
    import io

    from trials.driver import progress

    spec = parse({"name": "beat", "base": {"preset": "tiny"}, "replicates": 1,
                  "factors": {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}}}})
    clock = {"now": 1000.0}
    monkeypatch.setattr(progress.time, "time", lambda: clock["now"])
    out = io.StringIO()
    lines = progress.ProgressLines(spec, len(spec.trials), out=out, t0=900.0, slots=1)
    trials = [SimpleNamespace(trial_id=f"t{i}", config=spec.tune_params(t), last_result={}, error_msg="")
              for i, t in enumerate(spec.trials)]
    lines.on_trial_start(0, trials, trials[0])
    clock["now"] += 30
    lines.on_trial_result(0, trials, trials[0], {"step": 5, "spec/tau": 2.0})
    lines.on_step_end(0, trials)
    assert out.getvalue() == ""  # verbose 1: no start or evaluation line, and under a minute of silence
    clock["now"] += 31
    lines.on_step_end(0, trials)
    said = out.getvalue().splitlines()
    assert said == [f"[beat 0/2 done 2m41s] running {spec.trials[0].run_name} (1m01s)"]
    clock["now"] += 9  # the first trial ends after 70 s; the second, not started, takes as long
    lines.on_trial_complete(0, trials, trials[0])
    assert out.getvalue().splitlines()[-1].startswith(f"[beat 1/2 done 2m50s, ~1m10s left] finished "
                                                      f"{spec.trials[0].run_name}")


def test_bench_eta_reads_a_log_and_says_how_far_off_each_estimate_was():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "eta.py"
    spec = importlib.util.spec_from_file_location("bench_eta", path)
    eta = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(eta)
    log = ["shared target ab: trained in 36 s",
           "[s 1/4 done 1m00s, ~1m00s left] finished a r0",  # predicted 2m of an actual 2m30s: 0.8
           "[s 2/4 done 1m30s, ~1m30s left] finished b r0",  # 3m: 1.2
           "[s 3/4 done 2m00s, ?] running c r0 (10s)",  # no estimate: not counted
           "[s 4/4 done 2m30s] finished d r0"]
    found = eta.ratios(log)
    assert [(d, round(r, 3)) for d, _, r in found["s"]] == [(1, 0.8), (2, 1.2)]
    assert eta.seconds("1h07m") == 4020 and eta.seconds("3m05s") == 185
