"""The LSTM's training progress is one readable line per epoch on stderr (review-am F13: raw dict
reprs on stdout)."""

from spotwise.predictors.lstm import progress_line


def test_progress_line_reads_as_a_sentence() -> None:
    rec = {"phase": 1, "epoch": 3, "train_bce": 0.4991, "seconds": 4.2, "val_bce": 0.2638}
    assert progress_line(rec, 12) == "epoch 3/12 train 0.499 val 0.264 (4 s)"
    refit = {"phase": 2, "epoch": 1, "train_bce": 0.494, "seconds": 30.0}
    assert progress_line(refit, 2) == "refit epoch 1/2 train 0.494 (30 s)"
