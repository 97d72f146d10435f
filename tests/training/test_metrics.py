"""Metrics records, TensorBoard files and the curves plot."""

from __future__ import annotations

import json

from fullrank.training.metrics import MetricsLogger, curves_figure, plot_run, read_final


def test_no_events_file_until_something_is_logged(tmp_path):
    logger = MetricsLogger(tmp_path, resume_step=12)
    logger.close()
    assert not (tmp_path / "tb").exists()  # a finished run run again writes none
    logger = MetricsLogger(tmp_path, resume_step=12)
    logger.log(13, "train", loss=1.5)
    logger.close()
    assert len(list((tmp_path / "tb").iterdir())) == 1


def records():
    return [{"step": s, "split": "train", "loss": 6.0 - s / 100} for s in (50, 100, 150, 200)] + [
        {"step": s, "split": "valid", "loss": 5.9 - s / 200, "ppl": 2.0 ** (5.9 - s / 200), "tokens": 2_048}
        for s in (100, 200)
    ]


def labels(fig):
    return [[t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes]


def test_the_plot_marks_the_exact_final_figure_and_says_which_point_is_which():
    fig = curves_figure(records(), (200, {"loss": 5.99, "ppl": 399.4, "tokens": 12_345}))
    loss, ppl = labels(fig)
    assert "valid loss, periodic, on the first 2,048 validation tokens" in loss
    assert "final, exact: 5.990 over 12,345 tokens" in loss
    assert ppl == [
        "periodic, on the first 2,048 validation tokens",
        "final, exact: 399.40 over 12,345 tokens",
    ]
    star = [line for line in fig.axes[0].get_lines() if line.get_marker() == "*"]
    assert [tuple(star[0].get_xydata()[0])] == [(200.0, 5.99)]


def test_periodic_points_over_the_whole_text_say_so():
    fig = curves_figure(records(), (200, {"loss": 4.9, "ppl": 134.3, "tokens": 2_048}))
    assert "periodic, on the whole validation text" in labels(fig)[1]


def test_masked_lm_points_count_predictions_and_a_share_is_not_called_the_whole_text():
    bert = [
        {"step": 250, "split": "valid", "loss": 6.8, "mlm_ppl": 873.6, "mlm_acc": 4.3, "predictions": 11_420}
    ]
    final = {"loss": 6.7, "mlm_ppl": 810.0, "mlm_acc": 4.25, "predictions": 165_316}
    loss, ppl, scores = labels(curves_figure(bert, (250, final)))
    assert "valid loss, periodic, on the first 11,420 validation predictions" in loss
    assert "final, exact: 810.00 over 165,316 predictions" in ppl
    assert scores == ["valid MLM accuracy", "final MLM accuracy, exact: 4.25"]


def test_the_final_figure_comes_from_results_json(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records()))
    assert read_final(tmp_path) is None
    (tmp_path / "results.json").write_text(
        json.dumps({"steps": 200, "valid": {"loss": 5.99, "ppl": 399.4, "tokens": 12_345}})
    )
    assert read_final(tmp_path) == (200, {"loss": 5.99, "ppl": 399.4, "tokens": 12_345})
    out = plot_run(tmp_path)
    assert out == tmp_path / "curves.png" and out.stat().st_size > 10_000


def test_a_classifier_has_no_perplexity_panel_and_its_loss_is_per_example():
    mnli = [{"step": 20, "split": "train", "loss": 1.1}] + [
        {"step": s, "split": "valid", "loss": 1.0 + s / 1000, "accuracy": 39.0 + s / 450, "examples": 1_000}
        for s in (450, 900)
    ]
    fig = curves_figure(mnli, (900, {"accuracy": 41.0, "examples": 1_000}))
    assert [ax.get_title() for ax in fig.axes] == ["loss", "validation scores"]
    assert fig.axes[0].get_ylabel() == "loss (nats per example)"
    loss, scores = labels(fig)
    assert "valid loss, periodic, on the whole validation set" in loss
    assert scores == ["valid accuracy", "final accuracy, exact: 41.00"]


def test_a_run_that_logs_scores_alone_draws_its_training_loss_and_its_scores():
    squad = [{"step": s, "split": "train", "loss": 4.0 - s / 400} for s in (20, 400, 800)] + [
        {"step": s, "split": "valid", "em": s / 100, "f1": s / 50, "questions": 300} for s in (400, 800)
    ]
    fig = curves_figure(squad, None)
    assert [ax.get_title() for ax in fig.axes] == ["loss", "validation scores"]
    assert fig.axes[0].get_ylabel() == "loss (nats)"
    assert labels(fig)[1] == ["valid exact match", "valid F1"]


def test_a_final_figure_of_scores_alone_is_read_and_one_without_validation_is_not(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"steps": 9, "valid": {"accuracy": 41.0}}))
    assert read_final(tmp_path) == (9, {"accuracy": 41.0})
    (tmp_path / "results.json").write_text(json.dumps({"steps": 9, "valid": None, "test": {"f1": 11.7}}))
    assert read_final(tmp_path) is None
