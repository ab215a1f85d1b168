import gc

from runtime.worker.collector import GEN0_THRESHOLD, tune_for_batches


def test_tune_for_batches_freezes_and_raises_only_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        tune_for_batches()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GEN0_THRESHOLD, before[1], before[2])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_batch_of_records_fits_below_the_young_threshold() -> None:
    # Three container objects per record (parsed dict, event, row tuple) in a default 5,000-record batch.
    from lakestream.config import FlinkConfig

    assert 3 * FlinkConfig().batch_size < GEN0_THRESHOLD
