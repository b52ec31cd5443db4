-- Child runs (weir.StartChild) know their parent.
ALTER TABLE runs ADD COLUMN parent_id text NOT NULL DEFAULT '';
