"""The figures `GET /metrics` shows, kept up to date by PostgreSQL triggers.

Counting a million runs at every scrape takes seconds, and each web or worker process counting
in memory would see only its own share. So every write to runs, findings and deliveries adds a
few signed rows to `runs_metric_delta` (an INSERT only: no row is updated, so concurrent
writers never wait on one another), and `runs.services.metrics` folds those rows into
`runs_metric_total` (one row per project, metric and labels) under an advisory lock. A scrape
reads the totals plus the rows not folded yet: exact at any moment, in a few milliseconds.

Metric rows (name, labels):
- gauges of what is stored now: runs [verdict], runs_flagged [detector] (warn or stop runs
  with that detector), findings [detector, severity], waste_tokens [], waste_cost [],
  runs_live [] (live runs open);
- counters, never decremented: runs_ingested [format], deliveries [status];
- histograms: ingest_latency and analysis_latency as <name>_bucket [upper bound] (counts per
  bucket, not cumulative) and <name>_sum []. Ingest latency is trace created -> run stored;
  analysis latency is run created -> first analyzed_at (re-analyses are not observed).

The existing rows are counted once here (the histograms start empty), after the triggers
exist: CREATE TRIGGER waits for and then blocks writers until this migration commits, so
nothing is counted twice or missed.
"""

from django.db import migrations

SQL = r"""
CREATE TABLE runs_metric_delta (
    id bigserial PRIMARY KEY,
    project_id bigint NOT NULL,
    name varchar(40) NOT NULL,
    labels text[] NOT NULL DEFAULT '{}',
    value double precision NOT NULL
);
CREATE TABLE runs_metric_total (
    project_id bigint NOT NULL,
    name varchar(40) NOT NULL,
    labels text[] NOT NULL,
    value double precision NOT NULL,
    PRIMARY KEY (project_id, name, labels)
);
CREATE INDEX runs_metric_delta_project ON runs_metric_delta (project_id);
-- Each fold deletes every row: vacuum the dead ones soon, or scans read them for a while.
ALTER TABLE runs_metric_delta SET (
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000
);

-- The histogram bucket bounds in seconds (runs.services.metrics.LATENCY_BUCKETS), +Inf aside.
CREATE FUNCTION runs_metric_buckets() RETURNS double precision[] LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY[0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600]::double precision[]
$$;

-- Each run row's share of the gauges, and its events (ingested, the latency observations).
-- Written out here rather than in helper functions: a PL/pgSQL statement keeps its plan for
-- the session, while a SQL function called per row is planned again on every call.
CREATE FUNCTION runs_metric_run_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The gauges move by the new row's share minus the old row's.
    INSERT INTO runs_metric_delta (project_id, name, labels, value)
    SELECT r.project_id, v.name, v.labels, sum(r.sign * v.value)
    FROM (VALUES
        (-1::double precision, OLD.project_id, OLD.verdict::text, OLD.detectors::text[],
            OLD.waste_tokens::double precision, OLD.waste_cost, OLD.live, OLD.format::text),
        (1, NEW.project_id, NEW.verdict, NEW.detectors, NEW.waste_tokens, NEW.waste_cost,
            NEW.live, NEW.format)
    ) r (sign, project_id, verdict, detectors, tokens, cost, live, format)
    CROSS JOIN LATERAL (
        SELECT 'runs', ARRAY[r.verdict], 1::double precision
        UNION ALL
        SELECT 'runs_flagged', ARRAY[d], 1 FROM unnest(r.detectors) d
            WHERE r.verdict IN ('warn', 'stop')
        UNION ALL
        SELECT 'waste_tokens', '{}', r.tokens WHERE COALESCE(r.tokens, 0) <> 0
        UNION ALL
        SELECT 'waste_cost', '{}', r.cost WHERE COALESCE(r.cost, 0) <> 0
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

CREATE TRIGGER runs_metric_run AFTER INSERT OR DELETE ON runs_run
    FOR EACH ROW EXECUTE FUNCTION runs_metric_run_changed();
-- Live appends update a run many times a second: only a change to a counted column fires.
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

-- Findings come and go a run's worth at a time: one delta row per statement and kind.
CREATE FUNCTION runs_metric_findings_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runs_metric_delta (project_id, name, labels, value)
    SELECT r.project_id, 'findings', ARRAY[f.detector::text, f.severity::text],
        CASE WHEN TG_OP = 'DELETE' THEN -count(*) ELSE count(*) END
    FROM changed f JOIN runs_run r ON r.id = f.run_id
    GROUP BY 1, 3;
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_metric_findings_insert AFTER INSERT ON runs_finding
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION runs_metric_findings_added();
CREATE TRIGGER runs_metric_findings_delete AFTER DELETE ON runs_finding
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION runs_metric_findings_added();

CREATE FUNCTION runs_metric_finding_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runs_metric_delta (project_id, name, labels, value)
    SELECT r.project_id, 'findings', ARRAY[OLD.detector::text, OLD.severity::text], -1
        FROM runs_run r WHERE r.id = OLD.run_id
    UNION ALL
    SELECT r.project_id, 'findings', ARRAY[NEW.detector::text, NEW.severity::text], 1
        FROM runs_run r WHERE r.id = NEW.run_id;
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_metric_finding_update AFTER UPDATE OF run_id, detector, severity
    ON runs_finding FOR EACH ROW
    WHEN (
        OLD.run_id IS DISTINCT FROM NEW.run_id
        OR OLD.detector IS DISTINCT FROM NEW.detector
        OR OLD.severity IS DISTINCT FROM NEW.severity
    )
    EXECUTE FUNCTION runs_metric_finding_moved();

-- Each delivery attempt is one new row: a counter by status.
CREATE FUNCTION runs_metric_delivery_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runs_metric_delta (project_id, name, labels, value)
    SELECT c.project_id, 'deliveries', ARRAY[d.status::text], count(*)
    FROM changed d JOIN runs_channel c ON c.id = d.channel_id
    GROUP BY 1, 3;
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_metric_delivery_insert AFTER INSERT ON runs_delivery
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION runs_metric_delivery_added();

-- What is stored already, counted once.
INSERT INTO runs_metric_total (project_id, name, labels, value)
SELECT project_id, name, labels, sum(value) FROM (
    SELECT project_id, 'runs' AS name, ARRAY[verdict::text] AS labels, 1::float8 AS value
        FROM runs_run
    UNION ALL
    SELECT project_id, 'runs_flagged', ARRAY[d::text], 1 FROM runs_run, unnest(detectors) d
        WHERE verdict IN ('warn', 'stop')
    UNION ALL
    SELECT project_id, 'waste_tokens', '{}', waste_tokens FROM runs_run
        WHERE COALESCE(waste_tokens, 0) <> 0
    UNION ALL
    SELECT project_id, 'waste_cost', '{}', waste_cost FROM runs_run
        WHERE COALESCE(waste_cost, 0) <> 0
    UNION ALL
    SELECT project_id, 'runs_live', '{}', 1 FROM runs_run WHERE live
    UNION ALL
    SELECT project_id, 'runs_ingested', ARRAY[format::text], 1 FROM runs_run
    UNION ALL
    SELECT r.project_id, 'findings', ARRAY[f.detector::text, f.severity::text], 1
        FROM runs_finding f JOIN runs_run r ON r.id = f.run_id
    UNION ALL
    SELECT c.project_id, 'deliveries', ARRAY[d.status::text], 1
        FROM runs_delivery d JOIN runs_channel c ON c.id = d.channel_id
) existing
GROUP BY 1, 2, 3;
"""

REVERSE_SQL = """
DROP TRIGGER runs_metric_delivery_insert ON runs_delivery;
DROP TRIGGER runs_metric_finding_update ON runs_finding;
DROP TRIGGER runs_metric_findings_delete ON runs_finding;
DROP TRIGGER runs_metric_findings_insert ON runs_finding;
DROP TRIGGER runs_metric_run_update ON runs_run;
DROP TRIGGER runs_metric_run ON runs_run;
DROP FUNCTION runs_metric_delivery_added();
DROP FUNCTION runs_metric_finding_moved();
DROP FUNCTION runs_metric_findings_added();
DROP FUNCTION runs_metric_run_changed();
DROP FUNCTION runs_metric_buckets();
DROP TABLE runs_metric_total;
DROP TABLE runs_metric_delta;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0018_issue_versions"),
    ]

    operations = [migrations.RunSQL(SQL, REVERSE_SQL)]
