"""The Overview's all-time totals without a scan of every run: the metric triggers (0019) also
keep each project's steps, steps wasted in loops and seconds wasted in loops.

Before, the Overview summed `step_count`, `waste_steps` and `waste_seconds` over every run of
the user's projects, a sequential scan of the run table (342-452 ms of the page at 10.5M steps,
bench/bench_scale.py). `runs_metric_total` already held runs by verdict, waste tokens and
waste cost; these three join them as metric rows `steps`, `waste_steps` and `waste_seconds`
(no labels), read with the others (`metrics.read`, `overview.figures`).

A live run's appends change its step count and waste many times a second: they count only
once the run is no longer live (the trigger does not fire for them while it is), and the
Overview adds the open live runs' own figures (the partial index `run_live_quiet` finds them).

The table is locked against writers (SHARE ROW EXCLUSIVE: reads go on) while the trigger is
replaced and the stored runs are counted once, so no run is counted twice or missed.
"""

from django.db import migrations

# The gauges of 0019, plus the three sums; the histograms as they were.
FUNCTION = r"""
CREATE OR REPLACE FUNCTION runs_metric_run_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The gauges move by the new row's share minus the old row's.
    INSERT INTO runs_metric_delta (project_id, name, labels, value)
    SELECT r.project_id, v.name, v.labels, sum(r.sign * v.value)
    FROM (VALUES
        (-1::double precision, OLD.project_id, OLD.verdict::text, OLD.detectors::text[],
            OLD.waste_tokens::double precision, OLD.waste_cost, OLD.live, OLD.format::text,
            OLD.step_count::double precision, OLD.waste_steps::double precision,
            OLD.waste_seconds),
        (1, NEW.project_id, NEW.verdict, NEW.detectors, NEW.waste_tokens, NEW.waste_cost,
            NEW.live, NEW.format, NEW.step_count, NEW.waste_steps, NEW.waste_seconds)
    ) r (sign, project_id, verdict, detectors, tokens, cost, live, format, steps,
        waste_steps, waste_seconds)
    CROSS JOIN LATERAL (
        SELECT 'runs', ARRAY[r.verdict], 1::double precision
        UNION ALL
        SELECT 'runs_flagged', ARRAY[d], 1 FROM unnest(r.detectors) d
            WHERE r.verdict IN ('warn', 'stop')
        UNION ALL
        SELECT 'waste_tokens', '{}', r.tokens WHERE COALESCE(r.tokens, 0) <> 0
        UNION ALL
        SELECT 'waste_cost', '{}', r.cost WHERE COALESCE(r.cost, 0) <> 0
        UNION ALL  -- a live run's steps and waste count once it has ended
        SELECT 'steps', '{}', r.steps WHERE NOT r.live AND COALESCE(r.steps, 0) <> 0
        UNION ALL
        SELECT 'waste_steps', '{}', r.waste_steps
            WHERE NOT r.live AND COALESCE(r.waste_steps, 0) <> 0
        UNION ALL
        SELECT 'waste_seconds', '{}', r.waste_seconds
            WHERE NOT r.live AND COALESCE(r.waste_seconds, 0) <> 0
        UNION ALL
        SELECT 'runs_live', '{}', 1 WHERE r.live
        UNION ALL  -- a counter: it goes up on INSERT and never down
        SELECT 'runs_ingested', ARRAY[r.format], 1 WHERE TG_OP = 'INSERT'
    ) v (name, labels, value)
    WHERE r.project_id IS NOT NULL  -- OLD on INSERT, NEW on DELETE
    GROUP BY 1, 2, 3 HAVING sum(r.sign * v.value) <> 0;

    IF TG_OP = 'DELETE' THEN
        RETURN NULL;
    END IF;
    -- Histograms: a count in the smallest bucket the seconds fit (or +Inf), and the sum.
    INSERT INTO runs_metric_delta (project_id, name, labels, value)
    SELECT NEW.project_id, o.metric || v.suffix, v.labels, v.value
    FROM (
        SELECT 'ingest_latency' AS metric,
            greatest(0, extract(epoch FROM NEW.created_at - t.created_at))::double precision AS s
            FROM runs_trace t WHERE TG_OP = 'INSERT' AND t.id = NEW.trace_id
        UNION ALL
        SELECT 'analysis_latency',
            greatest(0, extract(epoch FROM NEW.analyzed_at - NEW.created_at))::double precision
            WHERE NEW.analyzed_at IS NOT NULL AND NEW.format <> 'live'
                AND (TG_OP = 'INSERT' OR OLD.analyzed_at IS NULL)
    ) o
    CROSS JOIN LATERAL (VALUES
        ('_bucket', ARRAY[COALESCE(
            (SELECT min(b)::text FROM unnest(runs_metric_buckets()) b WHERE o.s <= b), '+Inf'
        )], 1::double precision),
        ('_sum', '{}'::text[], o.s)
    ) v (suffix, labels, value);
    RETURN NULL;
END
$$;
"""

# The stored runs' share of the three new rows, counted once (what the trigger would have
# added for each run); a test runs it again against the triggers' own count.
BACKFILL = r"""
INSERT INTO runs_metric_total AS t (project_id, name, labels, value)
SELECT project_id, name, '{}', sum(value) FROM (
    SELECT project_id, 'steps' AS name, step_count::float8 AS value FROM runs_run
        WHERE NOT live AND step_count <> 0
    UNION ALL
    SELECT project_id, 'waste_steps', waste_steps FROM runs_run
        WHERE NOT live AND waste_steps <> 0
    UNION ALL
    SELECT project_id, 'waste_seconds', waste_seconds FROM runs_run
        WHERE NOT live AND COALESCE(waste_seconds, 0) <> 0
) existing
GROUP BY 1, 2
ON CONFLICT (project_id, name, labels) DO UPDATE SET value = t.value + EXCLUDED.value;
"""

UPDATE_TRIGGER = r"""
DROP TRIGGER runs_metric_run_update ON runs_run;
-- Live appends update a run many times a second: only a change to a counted column fires,
-- and a live run's steps and waste are not counted until it ends.
CREATE TRIGGER runs_metric_run_update
    AFTER UPDATE OF project_id, verdict, detectors, waste_tokens, waste_cost, analyzed_at, live,
        step_count, waste_steps, waste_seconds
    ON runs_run FOR EACH ROW
    WHEN (
        OLD.project_id IS DISTINCT FROM NEW.project_id
        OR OLD.verdict IS DISTINCT FROM NEW.verdict
        OR OLD.detectors IS DISTINCT FROM NEW.detectors
        OR OLD.waste_tokens IS DISTINCT FROM NEW.waste_tokens
        OR OLD.waste_cost IS DISTINCT FROM NEW.waste_cost
        OR (OLD.analyzed_at IS NULL AND NEW.analyzed_at IS NOT NULL)
        OR OLD.live IS DISTINCT FROM NEW.live
        OR (NOT NEW.live AND (
            OLD.step_count IS DISTINCT FROM NEW.step_count
            OR OLD.waste_steps IS DISTINCT FROM NEW.waste_steps
            OR OLD.waste_seconds IS DISTINCT FROM NEW.waste_seconds
        ))
    )
    EXECUTE FUNCTION runs_metric_run_changed();
"""

SQL = "LOCK TABLE runs_run IN SHARE ROW EXCLUSIVE MODE;\n" + FUNCTION + UPDATE_TRIGGER + BACKFILL

# 0019's function and trigger again, and the three rows gone.
REVERSE_FUNCTION = FUNCTION.replace(
    """        UNION ALL  -- a live run's steps and waste count once it has ended
        SELECT 'steps', '{}', r.steps WHERE NOT r.live AND COALESCE(r.steps, 0) <> 0
        UNION ALL
        SELECT 'waste_steps', '{}', r.waste_steps
            WHERE NOT r.live AND COALESCE(r.waste_steps, 0) <> 0
        UNION ALL
        SELECT 'waste_seconds', '{}', r.waste_seconds
            WHERE NOT r.live AND COALESCE(r.waste_seconds, 0) <> 0
""",
    "",
)
REVERSE_SQL = (
    "LOCK TABLE runs_run IN SHARE ROW EXCLUSIVE MODE;\n"
    + REVERSE_FUNCTION
    + """
DROP TRIGGER runs_metric_run_update ON runs_run;
CREATE TRIGGER runs_metric_run_update
    AFTER UPDATE OF project_id, verdict, detectors, waste_tokens, waste_cost, analyzed_at, live
    ON runs_run FOR EACH ROW
    WHEN (
        OLD.project_id IS DISTINCT FROM NEW.project_id
        OR OLD.verdict IS DISTINCT FROM NEW.verdict
        OR OLD.detectors IS DISTINCT FROM NEW.detectors
        OR OLD.waste_tokens IS DISTINCT FROM NEW.waste_tokens
        OR OLD.waste_cost IS DISTINCT FROM NEW.waste_cost
        OR (OLD.analyzed_at IS NULL AND NEW.analyzed_at IS NOT NULL)
        OR OLD.live IS DISTINCT FROM NEW.live
    )
    EXECUTE FUNCTION runs_metric_run_changed();
DELETE FROM runs_metric_total WHERE name IN ('steps', 'waste_steps', 'waste_seconds');
DELETE FROM runs_metric_delta WHERE name IN ('steps', 'waste_steps', 'waste_seconds');
"""
)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0029_overview_day_index"),
    ]

    operations = [migrations.RunSQL(SQL, REVERSE_SQL)]
