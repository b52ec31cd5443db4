package store

import (
	"errors"
	"testing"
)

// Ids and names a client chooses are refused the same before any store:
// a control character (NUL included: SQLite kept one PostgreSQL refused
// with its driver's words), a character that shows as another or as
// nothing, and a hook token that is a path segment of its own (red team,
// round five, L2–L4).
func TestChecksRefuseWhatNamesRefuses(t *testing.T) {
	for _, id := range []string{"", "a\x00b", "a\nb", "wf\u202eexe", "a\u00adb", "\u3164"} {
		if err := CheckID("workflow", id); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckID(%q) = %v, want ErrInvalid", id, err)
		}
	}
	for _, tok := range []string{".", "..", "a/b", "a?b", "a#b", "a\x00"} {
		if err := CheckHookToken(tok); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckHookToken(%q) = %v, want ErrInvalid", tok, err)
		}
	}
	for _, ok := range []string{"workflow//agent//chat", "hook_01J", "a b", "é"} {
		if err := CheckID("workflow", ok); err != nil {
			t.Errorf("CheckID(%q) = %v", ok, err)
		}
	}
	// A standalone stream's path, as a run stream's (red team, round
	// twelve: PUT /v1/stream/{path} took these).
	for _, path := range []string{"a\u202eb", "a\u2066b", "a\u2028b", "a\u0085b", "a\u009fb", "a\u200bb", "\ufeffa", "a\U000e0041", "\u3164"} {
		if err := (&CreateStreamParams{Path: path}).Check(); !errors.Is(err, ErrInvalid) {
			t.Errorf("a stream at %q: %v, want ErrInvalid", path, err)
		}
	}
	if err := (&CreateStreamParams{Path: "chat/\u00e9 1"}).Check(); err != nil {
		t.Errorf("a printable path: %v", err)
	}
}

// A migration names its versions as a start does: one no start could
// name is refused even when no run matches (red team, round six).
func TestMigrateChecksVersions(t *testing.T) {
	for _, v := range []string{"v\u202e1", "v\u00ad2", "v\n3"} {
		if err := (&MigrateRunsParams{From: "v1", To: v}).Check(); !errors.Is(err, ErrInvalid) {
			t.Errorf("to %q: %v, want ErrInvalid", v, err)
		}
	}
	if err := (&MigrateRunsParams{From: "", To: "v2"}).Check(); err != nil {
		t.Errorf("from no version: %v", err)
	}
}

// A queued run's priority is what every store keeps: past an int32 it is
// refused before any store (red team, round eight: 2^31 was PostgreSQL's
// 500 and SQLite's 201).
func TestPriorityBounded(t *testing.T) {
	for _, p := range []int{MaxPriority + 1, MinPriority - 1, 1 << 62} {
		c := &CreateRunParams{ID: "r", Workflow: "wf", Queue: "q", Priority: p}
		if err := c.Check(); !errors.Is(err, ErrInvalid) {
			t.Errorf("priority %d: %v, want ErrInvalid", p, err)
		}
	}
	for _, p := range []int{MaxPriority, MinPriority, 0} {
		c := &CreateRunParams{ID: "r", Workflow: "wf", Queue: "q", Priority: p}
		if err := c.Check(); err != nil {
			t.Errorf("priority %d: %v", p, err)
		}
	}
}
