"""The autoscaler's log levels, as pure functions: INFO only for news, errors once."""

import logging

from llmop.operator.autoscaling.decision import History, Result
from llmop.operator.autoscaling.spec import AutoscalingStatus
from llmop.operator.autoscaling.timer import error_level, log_level

HOLD = Result(current=2, desired=2, reason="Hold", message="", signal=None, ready=2, pod_signals=(), missing=(), history=History())
UP = Result(current=2, desired=3, reason="ScaleUp", message="", signal=None, ready=2, pod_signals=(), missing=(), history=History())


def test_a_repeated_hold_is_debug():
    assert log_level(AutoscalingStatus(desired_replicas=2), HOLD) == logging.DEBUG


def test_news_is_info():
    assert log_level(AutoscalingStatus(desired_replicas=2), UP) == logging.INFO
    assert log_level(None, HOLD) == logging.INFO  # the first decision this process makes
    assert log_level(AutoscalingStatus(desired_replicas=3), HOLD) == logging.INFO


def test_an_error_is_a_warning_once():
    assert error_level(None, "boom") == logging.WARNING
    assert error_level("boom", "boom") == logging.DEBUG
    assert error_level("boom", "other") == logging.WARNING
