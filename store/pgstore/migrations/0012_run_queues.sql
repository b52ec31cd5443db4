-- Queues for runs (store.CreateRunParams.Queue): a queued run waits,
-- unclaimable, until AdmitRuns lets it start; while a run of a queue is
-- pending or running, its dedupe key is its own.
ALTER TABLE runs ADD COLUMN queue text NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN queue_key text NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN dedupe text NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN queued boolean NOT NULL DEFAULT false;
CREATE INDEX runs_queued ON runs (queue, queue_key, priority DESC, seq) WHERE queued;
CREATE UNIQUE INDEX runs_dedupe ON runs (queue, dedupe) WHERE dedupe <> '' AND status IN ('pending', 'running');
