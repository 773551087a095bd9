"""What a delivery's outcome reads as (Flower's result, the key's history) and what a log line
made during a reconcile carries (its kind and key, as text or JSON)."""

from __future__ import annotations

import io
import json
import logging
import pickle
from collections.abc import Iterator

import pytest

from mcm_tasks.logs import install, log_context
from mcm_tasks.queue.policy import Action, Outcome, ReconcileFailed, describe


@pytest.mark.parametrize(
    ("status", "outcome", "text"),
    [
        ("run", Outcome(Action.DONE), "done"),
        ("run", Outcome(Action.REQUEUE, after=15.0), "requeue in 15s"),
        ("run", Outcome(Action.REQUEUE, after=0.5), "requeue in 0.5s"),
        ("run", Outcome(Action.REQUEUE), "requeue now"),
        ("run", Outcome(Action.RETRY, after=0.04, failures=3), "retry in 0.04s (failure 3)"),
        ("run", Outcome(Action.RETRY, after=1000.0, failures=40), "retry in 1000s (failure 40)"),
        ("busy", None, "skipped: key running elsewhere"),
        ("quarantined", None, "quarantined: its worker died repeatedly, retried at long-retry"),
        ("duplicate", None, "skipped: duplicate message"),
        ("invalid", None, "skipped: invalid task arguments"),
    ],
)
def test_outcome_in_words(status: str, outcome: Outcome | None, text: str) -> None:
    assert describe(status, outcome) == text


def test_failure_pickles_and_reads_class_then_message() -> None:
    """Celery pickles the exception to check it; an unpicklable one shows as a wrapper in Flower."""
    err = pickle.loads(pickle.dumps(ReconcileFailed.of("ApiException", "(500) boom")))
    assert str(err) == "ApiException: (500) boom" and isinstance(err, ReconcileFailed)


@pytest.fixture()
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    logger = logging.getLogger("test-logs")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, stream
    logger.removeHandler(handler)


def test_text_lines_inside_a_reconcile_name_kind_and_key(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    install(logger, "text")
    with log_context("machine", "shoot/m-1"):
        logger.info("draining %d pods", 3)
        logger.info("machine %s: already named", "shoot/m-1")
    logger.info("outside")
    assert stream.getvalue().splitlines() == [
        "machine shoot/m-1: draining 3 pods",
        "machine shoot/m-1: already named",
        "outside",
    ]


def test_json_lines_carry_kind_and_key_as_fields(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    install(logger, "json")
    with log_context("machineset", "shoot/set"):
        logger.warning("scaled %s", "up")
    logger.info("outside")
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["kind"] == "machineset" and inside["key"] == "shoot/set"
    assert inside["message"] == "scaled up" and inside["level"] == "WARNING"
    assert "key" not in outside and outside["logger"] == "test-logs"


def test_a_seed_tenants_lines_name_its_namespace(captured: tuple[logging.Logger, io.StringIO]) -> None:
    """In seed mode a Node's or a safety job's key does not say whose it is, nor does an informer's
    line: the tenant's namespace is added (and a JSON field)."""
    from mcm_tasks.settings import load_settings
    from mcm_tasks.tenancy import serving

    logger, stream = captured
    install(logger, "text")
    base = load_settings({"namespaces": "shoot-a"})
    with serving("shoot-a", base):
        with log_context("safety", "orphan-vms"):
            logger.info("collected")
        with log_context("machine", "shoot-a/m-1"):
            logger.info("created")
        logger.info("leading")
    logger.info("outside")
    assert stream.getvalue().splitlines() == [
        "safety orphan-vms (shoot-a): collected",
        "machine shoot-a/m-1: created",
        "[shoot-a] leading",
        "outside",
    ]
