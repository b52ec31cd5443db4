-- What limiters a parked run waits for (store.AdvanceParams.Limiters, in
-- sqlrow.EncodeLimiters's form: each name followed by a newline); NULL:
-- none. A change of one of them makes the run claimable at once, and a
-- limiter a parked run waits for is not deleted. Kept on the row, so it
-- outlives the run's place in the limiter's line (a place lasts a lease, a
-- window may last a day).
ALTER TABLE runs ADD COLUMN limiters text;
CREATE INDEX runs_limiters ON runs (limiters) WHERE limiters IS NOT NULL;
-- A run parked in a limiter's line for a held slot (AdvanceParams.Lined):
-- its step's priority; NULL: not lined. A worker with room in its lines
-- claims these first (ClaimRunsParams.Lined), highest priority, then oldest.
ALTER TABLE runs ADD COLUMN line_priority bigint;
CREATE INDEX runs_lined ON runs (line_priority DESC, seq) WHERE line_priority IS NOT NULL;
