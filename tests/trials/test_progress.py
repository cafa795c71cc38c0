"""The end-of-sweep table (`trials.progress.arms_table`): arms sorted, means of the shown
responses, and a timed response that no pass has measured yet named with its command."""

from types import SimpleNamespace

from trials.progress import arms_table
from trials.spec import parse


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
