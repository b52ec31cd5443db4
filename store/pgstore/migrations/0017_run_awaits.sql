-- What messages wake a parked run (store.AdvanceParams.Awaits, in
-- sqlrow.EncodeAwaits's form); NULL: every one. A message on another topic
-- waits in the log for the run's next look instead of replaying it.
ALTER TABLE runs ADD COLUMN awaits text;
