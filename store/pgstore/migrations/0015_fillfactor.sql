-- Room in each page for a row's next version: an update that changes no
-- indexed column (a run's log position and lease, a stream's head, a
-- writer's state) is then a heap-only tuple (HOT) update, which writes no
-- index entry. A run is updated at each record and a stream at each append;
-- without the room each update wrote a new entry in every index of the
-- table (the runs have nine). Pages written from now on keep it.
ALTER TABLE runs SET (fillfactor = 70);
ALTER TABLE streams SET (fillfactor = 70);
ALTER TABLE writers SET (fillfactor = 70);
ALTER TABLE fences SET (fillfactor = 80);
