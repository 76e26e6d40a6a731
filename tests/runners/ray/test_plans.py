"""The plan board and the driver's inbox on the session's Ray: a retried planning task's post counts
once, plans of items with no frames come in by polling, closing stops the board (and a board that
cannot be stopped does not raise over the run's own error)."""

from __future__ import annotations

import logging
import time

import pytest
import ray

from fusion_ray.runners.ray.datasource import pack
from fusion_ray.runners.ray.plans import PlanInbox, PostPlans, start_board

pytestmark = pytest.mark.ray


@pytest.fixture
def board(ray_cluster):
    board = start_board()
    yield board
    ray.kill(board)


def test_a_retried_post_counts_once(board):
    post, inbox = PostPlans(board), PlanInbox(board)
    post([(0, pack("first"))])
    post([(0, pack("retried")), (1, pack("other"))])  # a retried task posts item 0 again
    assert inbox.take(now=True) == [(0, "first"), (1, "other")]
    post([(1, pack("again"))])
    assert inbox.take(now=True) == []  # taken plans are not given twice, and item 1 was seen


def test_polling_brings_plans_of_items_without_frames(board):
    """An item with nothing to decode (resumed, refused) never shows up in an output batch: the
    driver polls for its plan every ``poll_s``."""
    PostPlans(board)([(4, pack("resumed"))])
    inbox = PlanInbox(board, poll_s=1.0)
    assert inbox.take(now=False) == []  # within poll_s of the last look: the board is not asked
    time.sleep(1.05)
    assert inbox.take(now=False) == [(4, "resumed")]


def test_close_stops_the_board(ray_cluster):
    board = start_board()
    assert ray.get(board.take.remote(), timeout=30) == []
    PlanInbox(board).close()
    deadline = time.monotonic() + 30
    # ray.kill is asynchronous: a call made just after it may still run (failed once in CI)
    with pytest.raises(ray.exceptions.RayActorError):
        while time.monotonic() < deadline:
            ray.get(board.take.remote(), timeout=30)
            time.sleep(0.1)


def test_a_board_that_cannot_be_stopped_is_logged_not_raised(ray_cluster, caplog):
    """The run closes the board while it may be handling an error: closing must not replace it."""
    with caplog.at_level(logging.WARNING, logger="fusion_ray.runners.ray.plans"):
        PlanInbox(board="not an actor").close()
    assert "cannot stop the plan board" in caplog.text
