-- The application version a run started on (store.Run.Version): workers
-- claim the runs of the versions they can replay.
ALTER TABLE runs ADD COLUMN version text NOT NULL DEFAULT '';
