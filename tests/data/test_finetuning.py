"""Fine-tuning data: classification files, labels, detokenization, SQuAD windows and offsets."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fullrank.data.finetuning import (
    SquadQuestion,
    classification_batches,
    detokenize,
    encode_texts,
    in_file_order,
    label_ids,
    make_windows,
    read_examples,
    read_squad,
    split_articles,
    window_starts,
)
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import DataError
from tests.helpers import shared_data

LABELS = ["entailment", "neutral", "contradiction"]
WORDS = (
    "the quick brown fox jumps over a lazy dog while Paris London 1856 Tesla was born in "
    "Smiljan an engineer who worked on alternating current systems"
).split()


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    text = tmp_path_factory.mktemp("tok") / "t.txt"
    rng = np.random.default_rng(0)
    text.write_text("\n".join(" ".join(rng.choice(WORDS, 12)) + " ." for _ in range(300)))
    return Tokenizer.train("wordpiece", [text], 120)


def test_every_format_reads_the_same_examples(tmp_path):
    rows = [
        {"text_a": "A man sleeps.", "text_b": "A person rests.", "label": "entailment"},
        {"text_a": "Dogs bark.", "text_b": "Cats fly.", "label": "contradiction"},
    ]
    (tmp_path / "d.json").write_text(json.dumps({str(i): r for i, r in enumerate(rows)}))
    (tmp_path / "l.json").write_text(json.dumps(rows))
    (tmp_path / "x.jsonl").write_text(
        "".join(
            json.dumps({"sentence1": r["text_a"], "sentence2": r["text_b"], "gold_label": r["label"]}) + "\n"
            for r in rows
        )
    )
    (tmp_path / "x.tsv").write_text(
        "id\tsentence1\tsentence2\tgold_label\n"
        + "".join(f"{i}\t{r['text_a']}\t{r['text_b']}\t{r['label']}\n" for i, r in enumerate(rows))
    )
    d = tmp_path / "hard"
    d.mkdir()
    (d / "s1.test").write_text("A man sleeps .\nDogs bark .\n")
    (d / "s2.test").write_text("A person rests .\nCats fly .\n")
    (d / "labels.test").write_text("entailment\ncontradiction\n")
    want = [
        (("A man sleeps.", "A person rests."), "entailment"),
        (("Dogs bark.", "Cats fly."), "contradiction"),
    ]
    for name in ("d.json", "l.json", "x.jsonl", "x.tsv"):
        got = read_examples(tmp_path / name)
        assert [(e.texts, e.label) for e in got] == want, name
    got = read_examples(d, detokenized=True)
    assert [(e.texts, e.label) for e in got] == want
    assert read_examples(tmp_path / "l.json", text_fields=["text_b"], label_field="label")[0].texts == (
        "A person rests.",
    )


def test_detokenization_rule():
    assert detokenize("I do n't know , he said .") == "I don't know, he said."
    assert detokenize("It 's John 's `` book '' ( here ) .") == "It's John's \"book\" (here)."


def test_a_label_outside_the_label_set_names_file_and_line(tmp_path):
    (tmp_path / "x.jsonl").write_text(
        '{"premise": "a", "hypothesis": "b", "label": "neutral"}\n'
        '{"premise": "a", "hypothesis": "b", "label": "maybe"}\n'
    )
    examples = read_examples(tmp_path / "x.jsonl")
    with pytest.raises(
        DataError,
        match=r"x\.jsonl:2: label 'maybe' is not one of entailment, "
        r"neutral, contradiction",
    ) as e:
        label_ids(examples, LABELS)
    assert "\n" not in str(e.value)


def test_pairs_are_cls_a_sep_b_sep_and_cut_from_the_longer(tok):
    rows, segs = encode_texts([("the quick brown fox jumps over", "a dog")], tok, 8)
    row, seg = rows[0], segs[0]
    assert len(row) == 8 and row[0] == tok.cls_id and row[-1] == tok.sep_id
    first_sep = list(row).index(tok.sep_id)
    assert seg.tolist() == [0] * (first_sep + 1) + [1] * (8 - first_sep - 1)
    assert tok.decode(row[first_sep + 1 :]).split() == ["a", "dog"]  # the shorter text intact


def test_evaluation_visits_each_example_once_longest_first_and_results_return_to_file_order():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 40, 37)
    rows = [np.full(n, 7 + i, dtype=np.int64) for i, n in enumerate(lengths)]  # example i holds 7 + i
    segs = [np.zeros(n, dtype=np.int64) for n in lengths]
    batches = classification_batches(rows, segs, np.arange(37) % 3, pad_id=0, batch_size=4)
    seen, padded = [], 0
    for batch in batches.eval_batches(5):
        tokens, mask = batch.inputs.tokens, batch.inputs.mask
        seen += (tokens[:, 0] - 7).tolist()
        padded += int((~mask).sum())
        assert (batch.labels.numpy() == np.asarray(seen[-len(tokens) :]) % 3).all()
    order = batches.eval_order(5)
    assert seen == order.tolist() and sorted(seen) == list(range(37))
    assert (np.diff(lengths[order]) <= 0).all()  # longest first
    file_order_padding = sum(
        int((lengths[i : i + 5].max() - lengths[i : i + 5]).sum()) for i in range(0, 37, 5)
    )
    assert padded < file_order_padding / 3
    assert in_file_order(np.asarray(seen), order).tolist() == list(range(37))
    assert in_file_order(list(seen), order) == list(range(37))
    # ``limit`` batches: the first examples of the file, and only those
    assert sorted(batches.eval_order(5, limit=2).tolist()) == list(range(10))
    assert sum(len(b.labels) for b in batches.eval_batches(5, limit=2)) == 10


def test_grouped_batches_pad_little_cover_each_example_once_an_epoch_and_stay_shuffled():
    rng = np.random.default_rng(3)
    lengths = rng.integers(5, 128, 1000)
    rows = [np.full(n, 7 + i, dtype=np.int64) for i, n in enumerate(lengths)]
    segs = [np.zeros(n, dtype=np.int64) for n in lengths]

    def epoch(group: bool, e: int = 0) -> tuple[list[int], float, list[int]]:
        b = classification_batches(
            rows, segs, np.zeros(1000, np.int64), pad_id=0, batch_size=8, group_by_length=group
        )
        seen, real, longest = [], 0, []
        for i in range(len(b)):
            batch = b.get(e, i)
            seen += (batch.inputs.tokens[:, 0] - 7).tolist()
            real += int(batch.inputs.mask.sum())
            longest.append(batch.inputs.tokens.shape[1])
        return seen, real / (8 * sum(longest)), longest

    plain, plain_real, _ = epoch(False)
    grouped, grouped_real, longest = epoch(True)
    assert len(set(grouped)) == len(grouped) == 1000  # every example once (125 full batches)
    assert plain_real < 0.75 and grouped_real > 0.9
    assert sorted(plain) == sorted(grouped) and grouped != plain
    # the batch order is shuffled, not longest first; another epoch groups other examples
    assert not (np.diff(longest) <= 0).all() and not (np.diff(longest) >= 0).all()
    assert epoch(True, 1)[0] != grouped and epoch(True, 0)[0] == grouped  # a function of the epoch
    # without grouping, the order is the one it always was
    assert plain == np.random.default_rng([0, 0]).permutation(1000).tolist()


def squad_sample(n_articles: int = 5) -> dict:
    rng = np.random.default_rng(1)
    data = []
    for a in range(n_articles):
        paragraphs: list[dict] = []
        for _ in range(2):
            words = list(rng.choice(WORDS, 70))
            context = " ".join(words)
            qas = []
            for k in range(4):
                i = int(rng.integers(0, 66))
                answer = " ".join(words[i : i + int(rng.integers(1, 4))])
                start = len(" ".join(words[:i])) + (1 if i else 0)
                qas.append(
                    {
                        "id": f"{a}-{len(paragraphs)}-{k}",
                        "question": f"what is {words[i]} ?",
                        "answers": [{"text": answer, "answer_start": start}],
                    }
                )
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"t{a}", "paragraphs": paragraphs})
    return {"version": "1.1", "data": data}


def assert_answers_recoverable(windows, questions) -> None:
    holding = set()
    for w in range(len(windows)):
        s, e = windows.starts[w], windows.ends[w]
        if s == 0:
            assert e == 0
            continue
        q = questions[windows.question[w]]
        off = windows.offsets[w]
        assert q.context[off[s, 0] : off[e, 1]] == q.answers[0][0]
        holding.add(windows.question[w])
    kept = {i for i, q in enumerate(questions) if q.id not in set(windows.skipped)}
    assert holding == kept  # every kept answer is in at least one of its windows


def test_every_training_answer_is_recovered_from_its_window_offsets(tmp_path, tok):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(squad_sample()))
    articles = read_squad(path)
    train, test = split_articles(articles, 4)
    assert len(test) == 8 and {q.article for q in test} == {3}
    windows = make_windows(train, tok, max_seq_len=40, doc_stride=7, training=True)
    assert not windows.skipped and len(windows) > 2 * len(train)  # many windows per question
    assert_answers_recoverable(windows, train)
    for w in range(len(windows)):
        assert len(windows.rows[w]) <= 40
    # every context token (by its first character) is the max-context token of one window
    by_q: dict[int, np.ndarray] = {}
    for w in range(len(windows)):
        cover = by_q.setdefault(windows.question[w], np.zeros(5000, int))
        own = windows.offsets[w][windows.max_context[w], 0]
        np.add.at(cover, own, 1)
    assert all(set(c[c > 0]) == {1} for c in by_q.values())


def test_doc_stride_is_the_step_between_windows():
    # Hugging Face's `stride` is the overlap instead: overlap = room - doc_stride
    assert window_starts(100, 30, 10) == [0, 10, 20, 30, 40, 50, 60, 70]
    assert window_starts(100, 30, 50) == [0, 30, 60, 90]  # never a gap: step ≤ the window
    assert window_starts(20, 30, 10) == [0]


def test_bad_squad_inputs_are_one_line_errors(tmp_path, tok):
    sample = squad_sample(1)
    sample["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1
    path = tmp_path / "s.json"
    path.write_text(json.dumps(sample))
    with pytest.raises(
        DataError,
        match=r"question 0-0-0: answer .* is not the context at "
        r"answer_start",
    ) as e:
        read_squad(path)
    assert "\n" not in str(e.value)
    q = SquadQuestion("long", " ".join(["quick"] * 30), "a dog", [("dog", 2)], 0)
    with pytest.raises(
        DataError,
        match=r"long: the question has \d+ tokens, more than a 24-token window can hold",
    ):
        make_windows([q], tok, max_seq_len=24, doc_stride=8, training=True)


@pytest.mark.slow
def test_every_answer_of_the_real_squad_file_is_recovered(tmp_path):
    path = shared_data("squad-v1.1", "dev-v1.1.json")
    articles = read_squad(path)
    train, test = split_articles(articles, 4)
    assert (len(train), len(test)) == (7793, 2777)
    text = tmp_path / "contexts.txt"
    text.write_text(
        "\n".join(dict.fromkeys(q.context for q in train + test))
        + "\n"
        + "\n".join(q.question for q in train)
    )
    tok = Tokenizer.train("wordpiece", [text], 6000)
    windows = make_windows(train, tok, max_seq_len=128, doc_stride=64, training=True)
    assert len(windows.skipped) < 0.01 * len(train)  # answers cutting a word piece
    assert_answers_recoverable(windows, train)
