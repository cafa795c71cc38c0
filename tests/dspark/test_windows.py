"""The seed's section-7 gold tests, made exact: x[i] = i, every gathered value asserted."""

import pytest
import torch

from dspark.blocks import gather_seq
from dspark.windows import window_positions, window_valid

K = 3
ANCHORS = torch.tensor([[2, 10]])  # (B=1, A=2)
X = torch.arange(20)[None]  # x[i] = i, so a gathered token *is* its position


def gathered(window):
    prev, label, target = window_positions(ANCHORS, K, window)
    return gather_seq(X, prev)[0], gather_seq(X, label)[0], target[0]


def test_aligned_matches_the_paper():
    prev, label, target = gathered("aligned")
    # slot s of the block at a: previous token x[a+s], label x[a+s+1], target logits at a+s
    assert prev.tolist() == [[2, 3, 4], [10, 11, 12]]
    assert label.tolist() == [[3, 4, 5], [11, 12, 13]]
    assert target.tolist() == [[2, 3, 4], [10, 11, 12]]


def test_shifted_is_the_seeds_code():
    prev, label, target = gathered("shifted")
    assert prev.tolist() == [[3, 4, 5], [11, 12, 13]]
    assert label.tolist() == [[4, 5, 6], [12, 13, 14]]
    assert target.tolist() == [[3, 4, 5], [11, 12, 13]]


def test_ids_only_leaves_the_target_column_one_ahead():
    prev, label, target = gathered("ids_only")
    assert prev.tolist() == [[2, 3, 4], [10, 11, 12]]
    assert label.tolist() == [[3, 4, 5], [11, 12, 13]]
    # the seed's one-line fix aligns tokens but not the TV target: it predicts x[a+s+2]
    assert target.tolist() == [[3, 4, 5], [11, 12, 13]]
    assert (target + 1 - label).tolist() == [[1, 1, 1], [1, 1, 1]]


def test_target_logits_column_predicts_the_label_only_when_aligned():
    # LM output at position p predicts x[p+1]; fake logits that are one-hot on p+1
    T = 19
    logits = torch.nn.functional.one_hot(torch.arange(1, T + 1), 32).float()[None]  # (1, T, V)
    for window, ok in (("aligned", True), ("shifted", True), ("ids_only", False)):
        _, label, target = window_positions(ANCHORS, K, window)
        predicted = gather_seq(logits, target).argmax(-1)
        assert torch.equal(predicted, gather_seq(X, label)) is ok, window


def test_validity_is_a_contiguous_prefix():
    prev, label, target = window_positions(torch.tensor([[5]]), 4, "shifted")
    valid = window_valid(prev, label, target, seq_len=8)  # x[0..8], LM outputs at 0..7
    # shifted slot s reads label 5+s+2 <= 8 and target 5+s+1 <= 7 -> s <= 1
    assert valid.tolist() == [[[True, True, False, False]]]
    prev, label, target = window_positions(torch.tensor([[5]]), 4, "aligned")
    assert window_valid(prev, label, target, seq_len=8).tolist() == [[[True, True, True, False]]]


def test_unknown_window_is_refused():
    with pytest.raises(ValueError, match="window: unknown level 'diagonal'"):
        window_positions(ANCHORS, K, "diagonal")
