"""The quick-start translation config keeps its promises: step-limited, enough checkpoints for
the average it decodes, test2016 scored at the end, the Multi30k recipe's model and data."""

from __future__ import annotations

from pathlib import Path

from fullrank.recipes.config import MTExperiment, load_experiment

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "mt" / "multi30k_quick.yaml"


def test_the_quick_config_is_step_limited_and_can_average_its_last_checkpoints():
    exp = load_experiment(CONFIG)
    full = load_experiment(CONFIG.with_name("multi30k_en_de.yaml"))
    assert isinstance(exp, MTExperiment) and isinstance(full, MTExperiment)
    train, decode = exp.train, exp.decode
    assert train.max_minutes is None  # the result does not depend on the machine's load
    assert train.steps % train.save_every == 0  # the last step is a regular checkpoint
    assert train.steps // train.save_every >= train.keep_last >= decode.average_last > 1
    assert decode.splits == ("test",) and exp.data.test == "multi30k/test_2016_flickr"
    # the recipe it shortens: the same data, vocabulary, model sizes and decoding; less dropout
    sizes = {k: v for k, v in exp.model.items() if "dropout" not in k}
    assert sizes == {k: v for k, v in full.model.items() if "dropout" not in k}
    assert exp.model["dropout"] < full.model["dropout"]
    assert (exp.data, decode.beam, decode.alpha) == (full.data, full.decode.beam, full.decode.alpha)
    assert train.steps < full.train.steps / 10
