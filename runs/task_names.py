"""The registered name of each Celery task, defined once.

`runs/tasks.py` registers each task under its name here, `services/queue.py` sends tasks by
these names (so no service imports the tasks, which import the services), and the beat
schedule in the settings names its tasks from here too. A name is what a queued message
carries: renaming one strands the messages already waiting in the broker. Which queue each
name goes to is decided in one place, the settings' TASK_QUEUES.
"""

INGEST_TRACE = "runs.tasks.ingest_trace"
ANALYZE_RUN = "runs.tasks.analyze_run"
ANALYZE_RUNS = "runs.tasks.analyze_runs"  # a batch of new runs
REANALYZE_RUNS = "runs.tasks.reanalyze_runs"  # a batch of runs again, after a policy change
ASSEMBLE_OTLP = "runs.tasks.assemble_otlp"
RUN_BACKTEST = "runs.tasks.run_backtest"
NIGHTLY_BACKTESTS = "runs.tasks.nightly_backtests"
SEND_ALERTS = "runs.tasks.send_alerts"
DELIVER = "runs.tasks.deliver"
SEND_TEST_DELIVERY = "runs.tasks.send_test_delivery"
EVALUATE_ALERT_RULES = "runs.tasks.evaluate_alert_rules"
EVALUATE_RATE_RULE = "runs.tasks.evaluate_rate_rule"
GROUP_LIVE_ISSUES = "runs.tasks.group_live_issues"
SEND_DIGESTS = "runs.tasks.send_digests"
COMPACT_METRICS = "runs.tasks.compact_metrics"
RECOVER = "runs.tasks.recover"
APPLY_RETENTION = "runs.tasks.apply_retention"
SWEEP_RAW_STORE = "runs.tasks.sweep_raw_store"
COMPUTE_COMPARE = "runs.tasks.compute_compare"
