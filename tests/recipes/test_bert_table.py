"""The BERT table driver: which runs it plans, in which order, and how it tabulates them."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from fullrank.recipes.bert_table import mean_std, plan, run_jobs, table

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "bert"


def test_plan_pretrains_first_and_fine_tunes_each_model_with_and_without_pretraining(tmp_path):
    jobs = plan(CONFIGS, tmp_path, vocab=tmp_path / "v.json", device="cpu", threads=2,
                pretrain_seeds=2, finetune_seeds=3, scale=0.5, extra=["data.root=/d"],
                only=["standard_h2", "fixed_h8"])
    pre = [j for j in jobs if j.group == "pretrain"]
    assert [j.name for j in pre] == ["pre_fixed_h8_s0", "pre_fixed_h8_s1", "pre_standard_h2_s0",
                                     "pre_standard_h2_s1"]
    assert "train.steps=1500" in pre[0].overrides and "data.root=/d" in pre[0].overrides
    fine = [j for j in jobs if j.group != "pretrain"]
    # 2 models × 2 tasks × (2 pre-training seeds × 3 + 3 from scratch)
    assert len(fine) == 2 * 2 * (2 * 3 + 3)
    assert all(j.after in {p.name for p in pre} for j in fine)
    scratch = [j for j in fine if not j.pretrained]
    assert len(scratch) == 12 and all("train.init_weights=false" in j.overrides for j in scratch)
    mnli = next(j for j in fine if j.group == "mnli")
    assert "train.steps=225" in mnli.overrides  # 450 × 0.5


def test_finished_runs_are_skipped_and_a_failed_pretraining_skips_its_fine_tunings(tmp_path):
    jobs = plan(CONFIGS, tmp_path, vocab=tmp_path / "v.json", device="cpu", threads=1,
                pretrain_seeds=1, finetune_seeds=1, scale=1.0, extra=[], only=["standard_h2"])
    for j in jobs:
        if j.group == "pretrain":
            j.overrides.append("train.steps=0")  # an invalid run: exits with status 2
    done = next(j for j in jobs if j.group == "squad" and not j.pretrained)
    done.run_dir.mkdir(parents=True)
    (done.run_dir / "results.json").write_text("{}")
    lines: list[str] = []
    status = run_jobs(jobs, 2, log=lines.append)
    assert status == {"pre_standard_h2_s0": 2}
    assert sum(line.startswith("skip") for line in lines) == 3  # the others wait on it


def fake_run(out: Path, name: str, config: Path, results: dict) -> None:
    run = out / name
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(results))
    model = yaml.safe_load(config.read_text()).get("model", {})
    (run / "config.yaml").write_text(yaml.safe_dump({"model": {"d_model": 128, "n_heads": 2,
                                                               "d_head": None, **model}}))


def test_table_means_and_standard_deviations(tmp_path):
    jobs = plan(CONFIGS, tmp_path, vocab=tmp_path / "v.json", device="cpu", threads=1,
                pretrain_seeds=1, finetune_seeds=2, scale=1.0, extra=[], only=["standard_h2"])
    for j in jobs:
        if j.group == "pretrain":
            fake_run(tmp_path, j.name, j.config, {"params": 10, "seconds": 60, "extra": {
                "non_embedding_params": 4}, "valid": {"mlm_acc": 20.0, "mlm_ppl": 50.0, "nsp_acc": 70.0}})
        elif j.group == "mnli":
            acc = 40.0 + 2 * j.seed + (10 if j.pretrained else 0)
            fake_run(tmp_path, j.name, j.config, {"seconds": 60, "valid": {"accuracy": acc}, "extra": {
                "eval_sets": {"snli_hard": {"accuracy": acc}}}})
    text = table(jobs)
    assert "| standard_h2 | 128 | 2 × 64 | 10 | 4 | 20.00 | 50.00 | 70.00 | 1 | 1.0 |" in text
    assert "| standard_h2 | pre-trained | 51.00 ± 1.41 | — | — | 51.00 ± 1.41 | 2 | — | — | 0 |" in text
    assert "| standard_h2 | scratch | 41.00 ± 1.41 |" in text
    assert mean_std([1.0]) == "1.00" and mean_std([]) == "—"
