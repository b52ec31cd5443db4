package queue

import (
	"context"
	"errors"
	"testing"

	"github.com/weirhq/weir/store"
)

func one(int) int { return 1 }

// A write whose caller gave up before a committer took it is left out of
// the batch.
func TestNextLeavesOutDropped(t *testing.T) {
	q := New[int](4)
	gone := &Item[int]{Op: 1, done: make(chan struct{})}
	gone.state.Store(dropped)
	q.ch <- gone
	errc := make(chan error, 1)
	kept := &Item[int]{Op: 2}
	go func() { errc <- q.Submit(t.Context(), kept) }()
	batch, ok := q.Next(nil, 8, one, 8)
	if !ok || len(batch) != 1 || batch[0] != kept {
		t.Fatalf("Next = %v, want the kept write alone", batch)
	}
	batch[0].Done()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// A caller whose context has ended gets its error, and its write is not
// taken.
func TestCancelledBeforeTaken(t *testing.T) {
	q := New[int](4)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := q.Submit(ctx, &Item[int]{Op: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit = %v, want context.Canceled", err)
	}
	q.Close()
	if batch, ok := q.Next(nil, 8, one, 8); ok {
		t.Fatalf("Next took %v", batch)
	}
}

// A write a committer took is waited for, even when its context ends.
func TestTakenIsWaitedFor(t *testing.T) {
	q := New[int](4)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- q.Submit(ctx, &Item[int]{Op: 7}) }()
	batch, ok := q.Next(nil, 8, one, 8)
	if !ok || len(batch) != 1 || batch[0].Op != 7 {
		t.Fatalf("Next = %v, %v", batch, ok)
	}
	cancel()
	select {
	case err := <-errc:
		t.Fatalf("Submit returned %v before Done", err)
	default:
	}
	batch[0].Done()
	if err := <-errc; err != nil {
		t.Fatalf("Submit = %v, want nil: the write was taken", err)
	}
}

func TestNextGroupsByCountAndSize(t *testing.T) {
	q := New[int](8)
	for i := 1; i <= 5; i++ {
		go q.Submit(t.Context(), &Item[int]{Op: i}) //nolint:errcheck // answered by Done below
	}
	var got []int
	for len(got) < 5 {
		batch, _ := q.Next(nil, 3, func(n int) int { return n }, 4)
		if len(batch) > 3 {
			t.Fatalf("batch of %d, max 3", len(batch))
		}
		for _, it := range batch {
			got = append(got, it.Op)
			it.Done()
		}
	}
}

func TestClosed(t *testing.T) {
	q := New[int](1)
	q.Close()
	q.Close()
	if err := q.Submit(t.Context(), &Item[int]{}); !errors.Is(err, store.ErrClosedStore) {
		t.Fatalf("Submit after Close = %v", err)
	}
	if _, ok := q.Next(nil, 1, one, 1); ok {
		t.Fatal("Next of a closed, empty queue")
	}
}
