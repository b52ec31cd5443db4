-- Schedules are listed a page at a time, by name in byte order (the order
-- SQLite keeps): a page starts at its cursor in this index rather than
-- after sorting every schedule.
CREATE INDEX schedules_name_c ON schedules (name COLLATE "C");
