-- The data bytes of a batch's records, so a read can stop fetching batches
-- once a page is full by the page rule (store.ReadParams.Fits), which counts
-- data bytes, not the encoded batch's. NULL in batches written before:
-- counted as 0, which only fetches more.
ALTER TABLE batches ADD COLUMN data_bytes bigint;
