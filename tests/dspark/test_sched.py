"""The speculative evaluation's scheduling responses and its jackknife records: the named
capacity curves (dspark.curves), accepted tokens at a matched budget, Algorithm 1 over R
requests against a literal transcription of the paper's pseudo-code, and the
delete-a-group jackknife over prompts."""

import json
import math

import numpy as np
import pytest

from dspark import calibration
from dspark.config import from_dict
from dspark.curves import (curve_table, describe_curve, measure_grid, parse_curve, read_sps_table, roofline_sps,
                           write_sps_table)
from dspark.metrics import lookup
from dspark.speculative_eval import (ROUNDS_FILE, SCHED_SEED, Rounds, accepted_at_budget, alg1_over_requests,
                                     budget_lengths, evaluation_records, jackknife, prompt_statistics)
from tests.conftest import tiny


# ---- the capacity curves ----

def test_roofline_h200_8b_by_hand():
    curve = parse_curve("roofline:h200:8b")
    # W = 16e9 bytes over 4.8e12 B/s = 1/300 s a step while memory-bound; the knee
    # B* = F W / (2 N BW) = 989.4e12 / 4.8e12 = 206.125 tokens; past it 989.4e12 / (16e9 B)
    assert roofline_sps(curve, 1) == pytest.approx(300.0, rel=1e-12)
    assert roofline_sps(curve, 206) == pytest.approx(300.0, rel=1e-12)  # still flat just below the knee
    assert roofline_sps(curve, 207) == pytest.approx(989.4e12 / (16e9 * 207), rel=1e-12)
    assert roofline_sps(curve, 412) == pytest.approx(150.0910194174757, rel=1e-12)  # 1/B: half at twice the knee
    d = describe_curve("roofline:h200:8b")
    assert d["model"] is True and d["kind"] == "roofline" and d["knee_tokens"] == pytest.approx(206.125)
    assert d["params"] == 8e9 and d["flat_sps"] == pytest.approx(300.0)
    assert describe_curve("roofline:a100:70b")["knee_tokens"] == pytest.approx(312e12 / 2.039e12)
    assert parse_curve("roofline:h100:1.5b").params == 1.5e9 and parse_curve("roofline:h100:350m").params == 3.5e8
    assert describe_curve("measured")["model"] is False
    table = curve_table("roofline:h200:8b", 300, measure=None)
    assert sorted(table) == list(range(1, 301)) and table[300] == pytest.approx(989.4e12 / (16e9 * 300))


@pytest.mark.parametrize("bad", ["nope", "roofline:tpu:8b", "roofline:h200:8x", "roofline:h200", "roofline:h200:0b",
                                 "table:", "roofline:h200:8b:x"])
def test_a_bad_curve_name_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"^sched_curve: ") as e:
        from_dict({"sched_curve": bad})
    assert "\n" not in str(e.value)


def test_sps_table_file_round_trip_and_refusals(tmp_path):
    good = write_sps_table(tmp_path / "t.json", {1: 10.0, 3: 6.0}, {"device": "test"})
    assert read_sps_table(good) == ({1: 10.0, 3: 6.0}, {"device": "test"})
    assert from_dict({"sched_curve": f"table:{good}"}).sched_curve == f"table:{good}"
    # between profiled sizes linear, past the largest the token throughput is held
    assert curve_table(f"table:{good}", 6, measure=None) == {1: 10.0, 2: 8.0, 3: 6.0, 4: 4.5, 5: 3.6, 6: 3.0}
    for name, text, why in (("a", "{not json", "not JSON"), ("b", "[1, 2]", "expected a JSON object"),
                            ("c", '{"x": 1.0}', "key 'x' is not a batch size"), ("d", '{"2": -1}', "SPS\\(2\\)"),
                            ("e", '{"2": "fast"}', "SPS\\(2\\)"), ("f", '{"2": 1, "meta": 3}', "meta"),
                            ("g", '{"meta": {}}', "no rows"), ("h", '{"0": 1.0}', "key '0'")):
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        with pytest.raises(ValueError, match=f"^SPS table {path}: .*{why}") as e:
            read_sps_table(path)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="no such file"):
        read_sps_table(tmp_path / "gone.json")


def test_a_run_naming_a_missing_table_is_refused_before_any_work(tmp_path, corpus_dir):
    from dspark.train import Trainer

    with pytest.raises(ValueError, match=r"SPS table .*gone.json: no such file"):
        Trainer(tiny(data=(str(corpus_dir),), out_dir=str(tmp_path), sched_curve=f"table:{tmp_path / 'gone.json'}"))
    assert not (tmp_path / "artifacts").exists()


def test_measured_grid_and_registry_rows():
    assert measure_grid(16) == [1, 2, 3, 4, 6, 8, 12, 16] and measure_grid(40)[-1] == 40
    assert lookup("sched/alg1_fixed@R64").unit == "flag" and lookup("sched/alg1_fixed@R64").better == ""
    assert lookup("split/timed_prompts").name == "split/timed_prompts"
    assert lookup("jack/sched/alg1_throughput@R16@g3").name == "jack/<response>@g"


# ---- accepted tokens at a matched budget ----

def test_accepted_at_budget_by_hand_with_ties():
    # a = [[1, 1, .5], [.5, .25, .125], [.5, .5, .25]]. Ranked (ties: lower slot, then lower
    # round): (0,0) (0,1) | (1,0) (2,0) (2,1) (0,2) | (1,1) (2,2) (1,2)
    conf = np.array([[1.0, 1.0, 0.5], [0.5, 0.5, 0.5], [0.5, 1.0, 0.5]])
    acc = np.array([3, 0, 1])
    assert budget_lengths(conf, 1).tolist() == [2, 1, 0]  # the round tie at 0.5: round 1 before round 2
    assert budget_lengths(conf, 2).tolist() == [3, 1, 2]
    assert budget_lengths(conf, 3).tolist() == [3, 3, 3]
    assert accepted_at_budget(conf, acc, 1) == pytest.approx(2 / 3)  # min(acc, l) = [2, 0, 0]
    assert accepted_at_budget(conf, acc, 2) == pytest.approx(4 / 3)  # [3, 0, 1]
    # the slot tie: a = [[1, .5, .25], [.5, .25, .125], [.5, .5, .25]]; at 0.5 the slot-1
    # positions of rounds 1 and 2 come before round 0's slot 2, so each round verifies one
    conf2 = np.array([[1.0, 0.5, 0.5], [0.5, 0.5, 0.5], [0.5, 1.0, 0.5]])
    assert budget_lengths(conf2, 1).tolist() == [1, 1, 1]
    assert accepted_at_budget(conf2, np.array([2, 1, 0]), 1) == pytest.approx(2 / 3)  # [1, 1, 0]
    with pytest.raises(ValueError, match="budget 4 is not a whole number of draft tokens in 1..K=3"):
        accepted_at_budget(conf, acc, 4)


# ---- Algorithm 1 over R requests, against the paper's pseudo-code ----

def paper_algorithm1(c, SPS):
    """Algorithm 1 (Hardware-Aware Prefix Scheduler) of the DSpark paper, line by line.
    c[r][j-1] is c_{r,j}; SPS a function of the batch size in tokens."""
    R, gamma = len(c), len(c[0])
    a = {}
    for r in range(R):  # 1: for r = 1 to R do
        for j in range(1, gamma + 1):  # 2: a_{r,j} <- prod_{i<=j} c_{r,i} for j = 1..gamma
            a[r, j] = math.prod(c[r][i - 1] for i in range(1, j + 1))
    E = sorted(((r, j) for (r, j) in a if a[r, j] > 0), key=lambda rj: -a[rj])  # 4: E, sorted descending by a
    ell = [0] * R  # 5: l_r <- 0; B <- R; tau* <- R
    B, tau = R, R
    theta_best, ell_star = R * SPS(R), [0] * R  # 6: Theta_best <- R SPS(R); l*_r <- 0
    for r, j in E:  # 7: for each (r, j) in E in sorted order
        ell[r] = j  # 8: l_r <- j; B <- B + 1; tau* <- tau* + a_{r,j}
        B += 1
        tau += a[r, j]
        theta = tau * SPS(B)  # 9: Theta <- tau* SPS(B)
        if theta > theta_best:  # 10
            theta_best, ell_star = theta, list(ell)  # 11
        else:
            break  # 13
    return ell_star  # 16


def literal_replay(conf, acc, SPS, R):
    """The brief's batching rule around the literal Algorithm 1: a fixed seeded permutation
    of the rounds, consecutive chunks of R, the remainder dropped."""
    order = np.random.default_rng(SCHED_SEED).permutation(len(acc))
    thr, lens = [], []
    for b in range(len(acc) // R):
        idx = order[b * R:(b + 1) * R]
        ell = paper_algorithm1(conf[idx].tolist(), SPS)
        committed = sum(min(int(acc[i]), l) + 1 for i, l in zip(idx, ell))
        thr.append(committed * SPS(R + sum(ell)))
        lens += ell
    return float(np.mean(thr)), float(np.mean(lens)), float(len(set(lens)) == 1)


@pytest.mark.parametrize("curve", ["roofline:h200:8b", "roofline:a100:70b", "inverse", "knee12", "steps8"])
@pytest.mark.parametrize("R,K", [(1, 4), (3, 7), (16, 5), (64, 7)])
def test_algorithm1_over_requests_is_the_papers(curve, R, K):
    rng = np.random.default_rng(R * 100 + K)
    N = R * 3 + 1  # a remainder to drop
    conf = rng.uniform(0.02, 0.99, size=(N, K)) ** rng.uniform(0.2, 3.0, size=(N, 1))
    acc = rng.integers(0, K + 1, size=N)
    largest = R * (K + 1)
    if curve == "inverse":  # a CPU-like table: steps/s falls as 1/B from B = 1
        table = {b: 100.0 / b for b in range(1, largest + 1)}
    elif curve == "knee12":  # flat to 12 tokens, then 1/B
        table = {b: 50.0 / max(b, 12) for b in range(1, largest + 1)}
    elif curve == "steps8":  # jagged: a step costs 10% more per tile of 8 tokens, so the early stop matters
        table = {b: 1.0 / (1.0 + 0.1 * math.ceil(b / 8)) for b in range(1, largest + 1)}
    else:
        table = curve_table(curve, largest, measure=None)
    got = alg1_over_requests(conf, acc, table, R)
    thr, mean_len, fixed = literal_replay(conf, acc, lambda b: table[b], R)
    assert got[f"sched/alg1_throughput@R{R}"] == pytest.approx(thr, rel=1e-12)
    assert got[f"sched/alg1_len@R{R}"] == pytest.approx(mean_len, rel=1e-12)
    assert got[f"sched/alg1_fixed@R{R}"] == fixed
    assert alg1_over_requests(conf[:R - 1], acc[:R - 1], table, R) == {}  # fewer rounds than R: no value


def test_a_roofline_curve_is_not_degenerate_at_64_requests():
    rng = np.random.default_rng(7)
    K, N = 7, 64 * 4
    conf = rng.uniform(0.05, 0.99, size=(N, K))
    acc = rng.integers(0, K + 1, size=N)
    table = curve_table("roofline:h200:8b", 64 * (K + 1), measure=None)
    at64 = alg1_over_requests(conf, acc, table, 64)
    assert at64["sched/alg1_fixed@R64"] == 0.0 and 0 < at64["sched/alg1_len@R64"] < K  # past the knee: it chooses
    at1 = alg1_over_requests(conf, acc, table, 1)  # 1 + K tokens, far below the knee: flat, so every slot
    assert at1["sched/alg1_len@R1"] == K and at1["sched/alg1_fixed@R1"] == 1.0
    # the CPU's 1/B table, by contrast, leaves every request at the same length for every arm
    cpu = alg1_over_requests(conf, acc, {b: 1.0 / b for b in range(1, 64 * 8 + 1)}, 64)
    assert cpu["sched/alg1_fixed@R64"] == 1.0


# ---- the jackknife over prompts ----

def _rounds(P, K=4, seed=0, per_prompt=(8, 15)):
    rng = np.random.default_rng(seed)
    per = rng.integers(*per_prompt, size=P)
    prompt = np.repeat(np.arange(P), per)
    per_g = rng.integers(2, 7, size=P)
    N = len(prompt)
    conf = rng.uniform(0.05, 0.95, size=(N, K))
    return Rounds(conf, conf ** 0.8, rng.integers(0, K + 1, size=N), prompt,
                  rng.integers(0, K + 1, size=per_g.sum()), np.repeat(np.arange(P), per_g), np.full(K, 1.25))


def test_jack_values_are_the_responses_without_each_prompt_group(tmp_path):
    rounds = _rounds(5)
    curve = {b: 1.0 / max(b, 6) for b in range(1, 64 * 5 + 1)}
    jack = jackknife(rounds, 5, curve)
    assert all(len(v) == 5 for v in jack.values())  # G = min(5 prompts, 16)
    assert "sched/alg1_len@R1" not in jack and "sched/alg1_fixed@R1" not in jack
    for g in range(5):
        keep = rounds.prompt % 5 != g
        keep_g = rounds.prompt_greedy % 5 != g
        assert jack["spec/tau"][g] == np.mean(rounds.accepted[keep] + 1)  # exactly the leave-group-out mean
        assert jack["spec/tau_greedy"][g] == np.mean(rounds.accepted_greedy[keep_g] + 1)
        survived = rounds.survived[keep]
        cal = calibration.prefix_metrics(rounds.conf[keep], survived, np.ones_like(survived, bool), "conf/")
        for k in ("conf/ece_mean", "conf/auroc_mean", "conf/brier_mean"):
            assert jack[k][g] == cal[k]  # recomputed whole, not averaged from groups
        assert jack["sched/accepted@budget2"][g] == accepted_at_budget(rounds.conf_sts[keep], rounds.accepted[keep], 2)
        assert jack["sched/alg1_throughput@R16"][g] == alg1_over_requests(
            rounds.conf_sts[keep], rounds.accepted[keep], curve, 16)["sched/alg1_throughput@R16"]
    # a value a group's removal leaves undefined (fewer rounds than R requests) is NaN
    two = _rounds(2, per_prompt=(8, 9))  # 16 rounds: R = 16 once in full, never without a prompt
    jack2 = jackknife(two, 2, curve)
    assert len(jack2["sched/alg1_throughput@R16"]) == 2 and all(math.isnan(v) for v in jack2["sched/alg1_throughput@R16"])
    per_prompt = prompt_statistics([2.0] * 5, [2.5] * 5, [0.1, 0.2], [0.3, 0.4], 5, jack, decode_s=10.0)
    m, items = evaluation_records(per_prompt)
    assert m == {"split/prompts": 5, "split/timed_prompts": 2, "split/decode_s_per_prompt": 2.0}  # counts only
    assert items["spec/tau"] == {"items": 5, "without": jack["spec/tau"]} and "spec/speedup" not in items
    assert evaluation_records(prompt_statistics([2.0], [2.5], [0.1], [0.3], 1, {"spec/tau": [2.0]}, 1.0))[1] == {}
    rounds.save(tmp_path / ROUNDS_FILE)
    again = Rounds.load(tmp_path / ROUNDS_FILE)
    assert all(np.array_equal(getattr(again, f), getattr(rounds, f)) for f in
               ("conf", "conf_sts", "accepted", "prompt", "accepted_greedy", "prompt_greedy", "temps"))


def test_at_most_16_groups():
    rounds = _rounds(20, seed=1)
    jack = jackknife(rounds, 20, {b: 1.0 for b in range(1, 64 * 5 + 1)})
    assert len(jack["spec/tau"]) == 16
    keep = ~np.isin(rounds.prompt, [3, 19])  # group 3 of 16: prompts 3 and 19
    assert jack["spec/tau"][3] == np.mean(rounds.accepted[keep] + 1)


def test_an_evaluation_writes_its_rounds_and_gathers_its_items(tmp_path, corpus_dir, monkeypatch):
    """The whole evaluation, untrained tiny models: the items it gathers for the report (each
    response without each prompt group) are recomputed from the rounds it wrote."""
    from dspark.train import Trainer

    monkeypatch.setenv("DSPARK_CACHE", str(tmp_path / "cache"))
    cfg = tiny(data=(str(corpus_dir),), out_dir=str(tmp_path / "run"), spec_prompts=3, spec_prompt_len=16,
               spec_new_tokens=40, sched_curve="roofline:h200:8b")
    trainer = Trainer(cfg)
    m = trainer.speculative(3, full=True)
    items = trainer.items
    art = tmp_path / "run" / "artifacts"
    rounds = Rounds.load(art / ROUNDS_FILE)
    assert len(rounds.accepted) == len(rounds.conf) == len(rounds.prompt) and set(rounds.prompt) == {0, 1, 2}
    assert m["spec/tau"] == np.mean(rounds.accepted + 1)
    for g in range(3):
        assert items["spec/tau"]["without"][g] == np.mean(rounds.accepted[rounds.prompt % 3 != g] + 1)
        keep = rounds.prompt % 3 != g
        survived = rounds.survived[keep]
        ece = calibration.prefix_metrics(rounds.conf[keep], survived, np.ones_like(survived, bool), "conf/")
        assert items["conf/ece_mean"]["without"][g] == ece["conf/ece_mean"]
    for name in ("sched/accepted@budget2", "sched/accepted@budget4", "sched/alg1_throughput@R1",
                 "sched/alg1_throughput@R16", "sched/alg1_len@R1", "sched/alg1_fixed@R1", "sched/alg1_throughput"):
        assert math.isfinite(m[name]), name
    assert m["sched/alg1_len@R1"] == cfg.block_size  # the roofline's flat part: every slot
    assert m["split/prompts"] == 3 and m["split/timed_prompts"] == 3
    assert not [k for k in m if k.startswith("jack/") or "@g" in k] and "spec/speedup" not in items
    assert items["spec/tau"]["items"] == 3
    per_prompt = json.loads((art / "per_prompt.json").read_text())
    assert "subsets" not in per_prompt and per_prompt["groups"] == 3 and per_prompt["timed_prompts"] == 3
    assert per_prompt["jack"]["spec/tau"] == items["spec/tau"]["without"]
    described = json.loads((art / "sched_curve.json").read_text())
    assert described["kind"] == "roofline" and described["model"] is True and described["rows"]
