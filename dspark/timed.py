"""DSpark's part of the interleaved timing pass (`trials time`, run by the engine's
`trials.timing.timing_pass`): what one repetition of a run is in each parallel stage, and the timed
response computed from the rounds' raw times.

Drafter stage: each run's final checkpoint is loaded once (`Trainer.load_checkpoint`, the
shared target from storage, `weights_only=True`), and a repetition decodes the same P held-out
prompts both ways (autoregressive, then speculative, prompt by prompt, the evaluation's fixed
decoding seeds, temperature 1, the run's `spec_new_tokens`); `spec/speedup` = (AR seconds
summed over rounds) / (speculative seconds summed over rounds), with its delete-a-group
jackknife over the timing prompts (its items, `items`: a run's speedup also moves with
how its drafter fares on the prompts decoded, which more prompts average out and more rounds
do not). Backbone stage: the step is a property of the configuration, not of the learned
weights, so each run's Trainer is built from its config (its seed) and a repetition is S
training steps (`Trainer.step`) on the same S batches; `train/step_ms` = mean ms per step
over all rounds.
"""

from __future__ import annotations

import time

import torch

from .blocks import Models
from .config import from_dict
from .data import sample_batch
from .metrics import jack_groups, jackknifed
from .speculative_eval import decode_set, prompts_from
from .train import Trainer

RESPONSE = {"drafter": "spec/speedup", "backbone": "train/step_ms"}


def arms(stage: str, configs: dict[str, dict], checkpoints: dict[str, str], settings, tmp: str):
    """The pass's runs, loaded: an object whose `run(key, whole)` times one repetition."""
    return DecodeArms(configs, checkpoints, settings, tmp) if stage == "drafter" else StepArms(configs, settings, tmp)


class Corpora:
    """One corpus per distinct data setting, shared by the runs' trainers (each would read
    and hash it again)."""

    def __init__(self):
        self.found: dict = {}

    def trainer(self, cfg):
        key = (cfg.data, cfg.text_column, cfg.seq_len, cfg.max_corpus_bytes)  # what build_corpus reads
        trainer = Trainer(cfg, corpus=self.found.get(key))
        self.found[key] = trainer.corpus
        return trainer


class DecodeArms:
    """Drafter stage: each run's final drafter and head with its (shared) target, decoding
    the same P prompts autoregressively and speculatively."""

    def __init__(self, configs: dict[str, dict], checkpoints: dict[str, str], settings, tmp: str):
        corpora, targets, self.arms = Corpora(), {}, {}
        for key, config in configs.items():
            trainer = corpora.trainer(from_dict({**config, "out_dir": tmp}))
            trainer.load_checkpoint(checkpoints[key])
            if trainer.stage != "done":
                raise ValueError(f"time: {checkpoints[key]} is not a finished trial's checkpoint "
                                 f"(stage {trainer.stage})")
            cfg = trainer.cfg
            target = targets.setdefault(cfg.target_path, trainer.target)  # one copy of a shared target
            for m in (target, trainer.drafter, trainer.head):
                m.eval()
            prompts = [p.to(trainer.device) for p in prompts_from(trainer.corpus.val, settings.prompts,
                                                                  cfg.spec_prompt_len)]
            models = Models(target, trainer.head, trainer.drafter, cfg.block_size)
            self.arms[key] = (models, prompts, cfg.spec_new_tokens, trainer.device)

    def run(self, key: str, whole: bool = True) -> dict[str, list[float]]:
        """One repetition: per prompt, the AR and the speculative seconds (a warm-up, not
        `whole`: the first prompt alone, enough to bring this run's weights into cache)."""
        models, prompts, new_tokens, device = self.arms[key]
        prompts = prompts if whole else prompts[:1]
        _, _, spec_s, ar_s = decode_set(models, prompts, new_tokens, 1.0, device, n_timed=len(prompts))
        return {"ar_s": ar_s, "spec_s": spec_s}


class StepArms:
    """Backbone stage: a Trainer per run built from its config (its seed: the step is the
    configuration's, not the learned weights'), stepping on the same S batches."""

    def __init__(self, configs: dict[str, dict], settings, tmp: str):
        corpora, self.arms = Corpora(), {}
        for key, config in configs.items():
            trainer = corpora.trainer(from_dict({**config, "out_dir": tmp}))
            cfg, gen = trainer.cfg, torch.Generator().manual_seed(settings.seed)
            batches = [sample_batch(trainer.corpus.train, cfg.batch_size, cfg.seq_len + 1, gen).to(trainer.device)
                       for _ in range(settings.steps)]  # each (B, T + 1)
            self.arms[key] = (trainer, [(x, trainer.anchors(x.shape[0]).to(trainer.device)) for x in batches])

    def run(self, key: str, whole: bool = True) -> dict[str, list[float]]:
        """One repetition: the seconds of each of the S steps (each ends synchronised; a
        warm-up, not `whole`: one step)."""
        trainer, batches = self.arms[key]
        batches = batches if whole else batches[:1]
        out = []
        for x, anchors in batches:
            t0 = time.perf_counter()
            trainer.step(x, anchors)
            out.append(time.perf_counter() - t0)
        return {"step_s": out}


def items(stage: str, rounds: list[dict]) -> dict[str, dict[str, dict]]:
    """run key -> its items ({response: {"items": P, "without": [...]}}, as `report(...,
    items=)` takes them). Drafter stage: each run's spec/speedup recomputed without each group
    of timing prompts (prompt i in group i mod G, G = jack_groups(P)): a run's speedup also
    varies with how its drafter fares on the prompts the pass decodes (the decoding seeds fix
    that part), so the analysis splits it off like any evaluation's. Backbone stage, or fewer
    than 2 prompts: none."""
    if stage != "drafter":
        return {}
    out = {}
    for k in rounds[0]["times"]:
        ar = [sum(r["times"][k]["ar_s"][i] for r in rounds) for i in range(len(rounds[0]["times"][k]["ar_s"]))]
        spec = [sum(r["times"][k]["spec_s"][i] for r in rounds) for i in range(len(ar))]
        G = jack_groups(len(ar))
        if G >= 2:
            out[k] = {RESPONSE[stage]: jackknifed(len(ar), [
                sum(a for i, a in enumerate(ar) if i % G != g) / sum(b for i, b in enumerate(spec) if i % G != g)
                for g in range(G)])}
    return out


def values(stage: str, rounds: list[dict]) -> dict[str, float]:
    """Each run's timed response from the rounds' raw times: spec/speedup = AR seconds /
    speculative seconds, each summed over rounds and prompts; train/step_ms = mean ms per step."""
    keys = rounds[0]["times"]
    if stage == "drafter":
        return {k: sum(sum(r["times"][k]["ar_s"]) for r in rounds) / sum(sum(r["times"][k]["spec_s"]) for r in rounds)
                for k in keys}
    return {k: 1000.0 * sum(sum(r["times"][k]["step_s"]) for r in rounds)
            / sum(len(r["times"][k]["step_s"]) for r in rounds) for k in keys}
