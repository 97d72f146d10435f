"""The four scores of ``fullrank.evaluation.bleu``: each against sacrebleu computed on text
tokenized by hand, and the properties that tell the two tokenized measures apart."""

import random

import pytest
from sacrebleu.metrics import BLEU

from fullrank.errors import DataError
from fullrank.evaluation.bleu import moses_tokenize, paired_bootstrap, score


def test_moses_tokenize_is_the_multi30k_pipeline():
    # lowercase, „…“ normalised to a straight quote, Moses tokens, XML escapes; hyphenated
    # words stay whole and decimal commas stay inside the number (tokenizer.perl without -a)
    line = "Ein Mann im T-Shirt ruft „Tor“ & läuft 3,5 km."
    assert moses_tokenize([line], "de") == ["ein mann im t-shirt ruft &quot; tor &quot; &amp; läuft 3,5 km ."]
    # the language picks the rules: English splits the clitic 's off, German keeps it attached
    assert moses_tokenize(["The dog's ball."], "en") == ["the dog &apos;s ball ."]


def test_moses_bleu_is_sacrebleu_on_the_moses_tokens():
    hyps = ["Ein Mann im T-Hemd geht's an.", "Zwei Hunde spielen im Schnee."]
    refs = ["Ein Mann im T-Shirt geht's an.", "Zwei Hunde spielen im tiefen Schnee."]
    by_hand_h = ["ein mann im t-hemd geht &apos; s an .", "zwei hunde spielen im schnee ."]
    by_hand_r = ["ein mann im t-shirt geht &apos; s an .", "zwei hunde spielen im tiefen schnee ."]
    expected = BLEU(tokenize="none").corpus_score(by_hand_h, [by_hand_r]).score
    report = score(hyps, refs, lang="de")
    assert report.moses_lowercased == pytest.approx(expected, abs=1e-9)
    # 13a keeps "geht's" whole where Moses splits it into three matching tokens: another figure
    assert report.tokenized_lowercased != pytest.approx(report.moses_lowercased, abs=0.01)
    assert report.tokenized_lowercased == pytest.approx(
        BLEU(lowercase=True).corpus_score(hyps, [refs]).score, abs=1e-9
    )


def test_quotes_differ_only_before_normalisation():
    # German quotes against straight ones: the same text to the Moses pipeline (normalised),
    # different characters to sacreBLEU and 13a
    hyps = ['Er ruft "Hallo" und winkt mit der Hand.']
    refs = ["Er ruft „Hallo“ und winkt mit der Hand."]
    report = score(hyps, refs, lang="de")
    assert report.moses_lowercased == pytest.approx(100.0)
    assert report.sacrebleu < 100.0 and report.tokenized_lowercased < 100.0
    assert report.lang == "de" and "-l de" in report.lines()[3]


def test_case_only_changes_the_lowercased_scores():
    hyps, refs = ["ein mann läuft am strand ."], ["Ein Mann läuft am Strand."]
    report = score(hyps, refs, lang="de")
    assert report.moses_lowercased == pytest.approx(100.0)
    assert report.tokenized_lowercased == pytest.approx(100.0)
    assert report.sacrebleu < 100.0


def test_bad_input_is_a_data_error():
    with pytest.raises(DataError, match="line-aligned"):
        score(["a"], ["a", "b"], lang="de")
    with pytest.raises(DataError, match="no hypotheses"):
        score([], [], lang="de")


def test_the_cli_reads_the_language_from_the_reference_name():
    from fullrank.cli.bleu import target_language

    assert target_language("data/test_2016_flickr.de", None) == "de"
    assert target_language("data/test_2016_flickr.de", "en") == "en"  # --lang wins
    assert target_language("refs.txt", None) is None and target_language("refs", None) is None


def random_sentences(n: int, words: int = 12) -> list[str]:
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(300)]
    return [" ".join(rng.choices(vocab, k=words)) + " ." for _ in range(n)]


def test_paired_bootstrap_tells_a_real_difference_from_none():
    refs = random_sentences(80)
    # a baseline that loses two words in every sentence against a system that has them all
    damaged = [" ".join(r.split()[:3] + r.split()[5:]) for r in refs]
    better = paired_bootstrap(refs, damaged, refs, resamples=200)
    assert [r.metric for r in better] == ["sacreBLEU", "chrF", "tokenized BLEU, lowercased"]
    assert all(r.system > r.baseline and r.p_value < 0.05 for r in better)
    assert better[0].system == pytest.approx(score(refs, refs, lang="de").sacrebleu)
    assert "bs:200" in better[0].signature and "*" in better[0].line()
    # two systems equally damaged in different places: a difference that is chance
    elsewhere = [" ".join(r.split()[:6] + r.split()[8:]) for r in refs]
    even = paired_bootstrap(elsewhere, damaged, refs, resamples=200)
    assert all(r.p_value > 0.05 for r in even) and "*" not in even[0].line()
    # the same translations twice: p = 1, not sacrebleu's "significant" zero difference
    same = paired_bootstrap(damaged, damaged, refs, resamples=200)
    assert all(r.system == r.baseline and r.p_value == 1.0 for r in same)


def test_paired_bootstrap_needs_aligned_systems():
    with pytest.raises(DataError, match="2 baseline but 3 references"):
        paired_bootstrap(["a", "b", "c"], ["a", "b"], ["a", "b", "c"])
    with pytest.raises(DataError, match="resamples = 0"):
        paired_bootstrap(["a"], ["a"], ["a"], resamples=0)
