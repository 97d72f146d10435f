"""Can an encoder read a question at all? Two synthetic SQuAD tasks over paragraphs of 40 distinct
random words from the checkpoint's own vocabulary, fine-tuned with ``configs/bert/squad.yaml``
from a pre-trained run and from the same model's random weights:

- ``find``: "where is W ?" — the answer is W itself (matching a question word in the context);
- ``after``: "what comes after W ?" — the answer is the word after W (a match, then one step).

Chance is about 1 in 40. 48 articles of 10 paragraphs and 5 questions each; every 4th article is
the test part (``data.test_every: 4``): 1,800 training and 600 test questions.

    python bench/squad_synthetic.py RUN [--steps 400] [--threads 1] [--out-dir runs/squad_synthetic]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from fullrank.training.checkpoints import load_checkpoint

REPO = Path(__file__).resolve().parents[1]
QUESTION = {"find": "where is {} ?", "after": "what comes after {} ?"}


def words_of(run: Path) -> list[str]:
    """Whole lower-case words of at least 3 letters in the checkpoint's vocabulary, sorted."""
    tok = load_checkpoint(run).tokenizer
    if tok is None:
        sys.exit(f"{run}: the checkpoint has no tokenizer; give a BERT pre-training run")
    return sorted(w for w in tok.hf.get_vocab() if w.isalpha() and w.islower() and len(w) >= 3)


def synthetic(task: str, vocab: list[str], seed: int = 0) -> dict:
    """A SQuAD v1.1 file of ``task`` (module docstring)."""
    rng = random.Random(seed)
    articles = []
    for a in range(48):
        paragraphs = []
        for p in range(10):
            words = rng.sample(vocab, 40)
            context = " ".join(words)
            qas = []
            for k, i in enumerate(rng.sample(range(39), 5)):
                j = i + 1 if task == "after" else i
                start = sum(len(w) + 1 for w in words[:j])
                assert context[start : start + len(words[j])] == words[j]
                qas.append(
                    {
                        "id": f"{task}-{a}-{p}-{k}",
                        "question": QUESTION[task].format(words[i]),
                        "answers": [{"text": words[j], "answer_start": start}],
                    }
                )
            paragraphs.append({"context": context, "qas": qas})
        articles.append({"title": f"{task}-{a}", "paragraphs": paragraphs})
    return {"version": "1.1", "data": articles}


def fine_tune(run: Path, data: Path, name: str, out: Path, steps: int, threads: int, scratch: bool) -> dict:
    """Fine-tune from ``run`` (its random weights with ``scratch``) on ``data``; the test scores."""
    cmd = [
        sys.executable, "-m", "fullrank", "train", str(REPO / "configs" / "bert" / "squad.yaml"),
        f"train.init_from={run}", f"data.root={data.parent}", f"data.train={data.name}",
        f"train.steps={steps}", f"train.warmup={max(1, steps // 10)}", f"train.eval_every={steps}",
        f"train.save_every={steps}", f"train.threads={threads}", f"out_dir={out}", f"name={name}",
        "--quiet",
    ]  # fmt: skip
    if scratch:
        cmd.append("train.init_weights=false")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / name / "results.json").read_text(encoding="utf-8"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a BERT pre-training run or checkpoint")
    ap.add_argument("--steps", type=int, default=400, help="fine-tuning steps of 32 (400: 7 epochs)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tasks", nargs="+", default=["find", "after"], choices=sorted(QUESTION))
    ap.add_argument("--out-dir", type=Path, default=REPO / "runs" / "squad_synthetic")
    ap.add_argument("--report", type=Path, default=REPO / "bench" / "results" / "squad_synthetic.md")
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    vocab = words_of(args.run)
    lines = [
        "# SQuAD pipeline on synthetic questions",
        "",
        f"Start: `{args.run}`; {args.steps} fine-tuning steps of 32 (`configs/bert/squad.yaml`), "
        f"{args.threads} thread(s), {time.strftime('%Y-%m-%d %H:%M')}; {len(vocab):,} words to draw from.",
        "",
        "| task | start | test EM | test F1 | minutes |",
        "|---|---|---|---|---|",
    ]
    print("\n".join(lines[2:]), flush=True)
    for task in args.tasks:
        data = args.out_dir / f"{task}.json"
        data.write_text(json.dumps(synthetic(task, vocab)), encoding="utf-8")
        for start, scratch in (("pre-trained", False), ("random weights", True)):
            name = f"{task}-{'scratch' if scratch else 'pre'}-{args.steps}"
            r = fine_tune(args.run, data, name, args.out_dir, args.steps, args.threads, scratch)
            test, minutes = r["test"], r["seconds"] / 60
            row = f"| {task} | {start} | {test['em']:.2f} | {test['f1']:.2f} | {minutes:.1f} |"
            lines.append(row)
            print(row, flush=True)
    args.report.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
