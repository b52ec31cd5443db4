package sqlitestore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/store/sqlitestore"
)

// Followers read through the tail cache while a writer appends more records
// than the cache keeps: every follower, and a late reader starting below the
// cache, must read every record once, in order, with the bytes appended.
func TestTailCacheFollowers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "weir.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	info, err := s.OpenStream(ctx, &store.OpenStreamParams{Path: "tail", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	const batches, per = 120, 50 // 6,000 records: more than one cache entry holds
	chunk := func(i int) string { return fmt.Sprintf("record %05d %s", i, string(make([]byte, i%300))) }

	follow := func(from int64, want int) error {
		next := from
		for next < int64(want) {
			res, err := s.Read(ctx, &store.ReadParams{StreamID: info.ID, From: next, Limit: 37})
			if err != nil {
				return err
			}
			for _, r := range res.Records {
				if r.Offset != next {
					return fmt.Errorf("got offset %d, want %d", r.Offset, next)
				}
				if got := string(r.Data); got != chunk(int(next)) {
					return fmt.Errorf("offset %d: got %.20q, want %.20q", next, got, chunk(int(next)))
				}
				next++
			}
			if len(res.Records) == 0 {
				if err := s.Wait(ctx, info.ID, next); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 16 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- follow(0, batches*per) }()
	}
	// Let the followers wait at the tail first.
	for deadline := time.Now().Add(10 * time.Second); s.Waiting(info.ID) < 16; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 16 followers wait at the tail after 10s", s.Waiting(info.ID))
		}
	}
	for b := range batches {
		chunks := make([][]byte, per)
		for i := range chunks {
			chunks[i] = []byte(chunk(b*per + i))
		}
		if _, err := s.Append(ctx, &store.AppendParams{StreamID: info.ID, Chunks: chunks}); err != nil {
			t.Fatal(err)
		}
		if b == batches/2 {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- follow(0, batches*per) }() // starts far below the cache
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A read at the head and past it behave as without the cache.
	res, err := s.Read(ctx, &store.ReadParams{StreamID: info.ID, From: batches * per})
	if err != nil || len(res.Records) != 0 || res.NextOffset != batches*per {
		t.Fatalf("read at the head: %+v, %v", res, err)
	}
	if _, err := s.Read(ctx, &store.ReadParams{StreamID: info.ID, From: batches*per + 1}); err == nil {
		t.Fatal("read past the head: no error")
	}
}
