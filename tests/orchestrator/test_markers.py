"""What proves a start to launch's and Slurm's verify (``markers.progress_shown``)."""

from verlctl.orchestrator.markers import TRAINING_MARKER, progress_shown


def test_progress_after_the_marker_is_a_start_and_its_answer_is_the_trainers_first_line() -> None:
    head = f"[verlctl 05:34:26] node vm: Ray head\n{TRAINING_MARKER}: verl.trainer.main_ppo, log: x.log\n"
    assert progress_shown(head) is None  # the marker alone
    assert progress_shown(head + "\n  \nTotal training steps: 1\n") is None  # printed, no progress yet
    done = head + "\nTotal training steps: 1\nstep:1 - actor/pg_loss:0.1\n[verlctl 05:34:30] training finished\n"
    assert progress_shown(done) == "Total training steps: 1"  # a run that already finished started
    bar = head + "Training Progress:   20%|##        | 1/5\n"
    assert progress_shown(bar) == "Training Progress:   20%|##        | 1/5"


def test_progress_before_the_marker_or_not_at_a_lines_start_is_not_a_start() -> None:
    before = "step:3 - from the attempt before\nTraining Progress: 1/5\n"
    assert progress_shown(before) is None  # no marker: nothing of this attempt's trainer yet
    assert progress_shown(before + TRAINING_MARKER + "\nloading model\n") is None
    assert progress_shown(f"{TRAINING_MARKER}\nnext step:1 - x\n") is None  # "step:" only at a line's start
    assert progress_shown(f"{TRAINING_MARKER}\nstep:12 - x\n") == "step:12 - x"
