"""``fullrank info`` through the real entry points."""

from __future__ import annotations

import subprocess
import sys
import typing

from fullrank.cli import main


def test_info_prints_breakdown_heads_flops(capsys):
    assert main(["info", "aiayn_base"]) == 0
    out = capsys.readouterr().out
    for needle in (
        "63,082,496",
        "embeddings",
        "attention",
        "ffn",
        "norms",
        "heads",
        "d_head 64",
        "FLOPs per token",
    ):
        assert needle in out


def test_info_lists_every_parameter_tensor_and_says_which_are_tied(capsys):
    from fullrank.models import ModelConfig, build_model
    from fullrank.models.presets import preset

    assert main(["info", "bert_base", "--parameters"]) == 0
    rows = [
        line.strip("│ ").split("│") for line in capsys.readouterr().out.splitlines() if line.count("│") == 4
    ]
    rows = [[cell.strip() for cell in row] for row in rows if "." in row[0]]
    model = build_model(typing.cast(ModelConfig, preset("bert_base")))
    assert [r[0] for r in rows] == [n for n, _ in model.named_parameters(remove_duplicate=False)]
    shapes = dict(model.named_parameters())
    for name, shape, size in rows:
        if name in shapes:
            assert shape == " × ".join(map(str, shapes[name].shape)) and size == f"{shapes[name].numel():,}"
        else:
            assert size == "tied to embed.token.weight", name


def test_info_warns_on_the_bottleneck(capsys):
    assert main(["info", "b20_bert_table1_h32"]) == 0  # d_head = 32 < n = 128
    out = capsys.readouterr().out
    assert "warning" in out and "d_head=32 < seq_len=128" in out


def test_info_unknown_preset_is_one_line_and_exit_2(capsys):
    assert main(["info", "aiayn_bsae"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "did you mean 'aiayn_base'" in err


def test_python_dash_m_entry_point():
    out = subprocess.run(
        [sys.executable, "-m", "fullrank", "info", "--list"], capture_output=True, text=True, check=True
    ).stdout
    assert "aiayn_table3_B_dk16" in out and "b20_bert_table2a_h32" in out


def test_info_warns_when_heads_leave_the_fused_kernels(capsys):
    assert main(["info", "b20_lm_fixed_h8"]) == 0
    assert "FlashAttention" not in capsys.readouterr().out
    from fullrank.models.presets import b20_lm_fixed

    warning = b20_lm_fixed(8, d_head=512).kernel_warning()
    assert warning is not None and "query-chunked path" in warning


def test_info_reads_experiment_files(capsys):
    from pathlib import Path

    cfg = Path(__file__).resolve().parents[2] / "configs" / "mt" / "multi30k_en_de.yaml"
    assert main(["info", str(cfg)]) == 0
    assert "EncoderDecoderConfig" in capsys.readouterr().out
    lm = cfg.parents[1] / "lm" / "ptb_fixed.yaml"
    assert main(["info", str(lm)]) == 2
    assert "pass --vocab-size" in capsys.readouterr().err
    assert main(["info", str(lm), "--vocab-size", "10002"]) == 0
