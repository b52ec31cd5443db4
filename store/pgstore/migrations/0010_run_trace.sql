-- A run's trace (store.Run.TraceParent), so that its executions in any
-- process are spans of one trace.
ALTER TABLE runs ADD COLUMN trace_parent text NOT NULL DEFAULT '';
