"""`GET /metrics` counts the calls the live guard stopped (`stopped_calls`, a counter per
project): each stop answer, the first at a point of a run (an insert) and each ask again
(`times` going up), as 0019's triggers count the other figures."""

from django.db import migrations

SQL = r"""
CREATE FUNCTION runs_metric_stopped_call() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runs_metric_delta (project_id, name, labels, value)
    SELECT r.project_id, 'stopped_calls', '{}',
        NEW.times - CASE WHEN TG_OP = 'UPDATE' THEN OLD.times ELSE 0 END
    FROM runs_run r WHERE r.id = NEW.run_id;
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_metric_stopped_call AFTER INSERT OR UPDATE OF times ON runs_stoppedcall
    FOR EACH ROW EXECUTE FUNCTION runs_metric_stopped_call();

-- What is stored already, counted once.
INSERT INTO runs_metric_total AS t (project_id, name, labels, value)
SELECT r.project_id, 'stopped_calls', '{}', sum(s.times)
FROM runs_stoppedcall s JOIN runs_run r ON r.id = s.run_id
GROUP BY 1
ON CONFLICT (project_id, name, labels) DO UPDATE SET value = t.value + EXCLUDED.value;
"""

REVERSE_SQL = """
DROP TRIGGER runs_metric_stopped_call ON runs_stoppedcall;
DROP FUNCTION runs_metric_stopped_call();
DELETE FROM runs_metric_total WHERE name = 'stopped_calls';
DELETE FROM runs_metric_delta WHERE name = 'stopped_calls';
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0021_live_issues_queued"),
    ]

    operations = [migrations.RunSQL(SQL, REVERSE_SQL)]
