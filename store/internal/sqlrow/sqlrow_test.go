package sqlrow

import (
	"slices"
	"strings"
	"testing"

	"github.com/weirhq/weir/store"
)

func TestAwaitsRoundTrip(t *testing.T) {
	for _, a := range []*store.Awaits{nil, {Topics: []string{}}, {Topics: []string{"a"}}, {Topics: []string{"a b", "c", "ü"}}} {
		enc := EncodeAwaits(a)
		s, valid := enc.(string)
		got := DecodeAwaits(s, valid)
		if (a == nil) != (got == nil) || a != nil && !slices.Equal(a.Topics, got.Topics) {
			t.Fatalf("%+v came back as %+v", a, got)
		}
	}
}

// The SQL's bound is store's.
func TestListedValueBound(t *testing.T) {
	if store.MaxListedValue != 4096 {
		t.Fatalf("elided's SQL says 4096, store.MaxListedValue is %d", store.MaxListedValue)
	}
}

// WorldRunHeadCols are WorldRunCols without the data: the rewrite found
// what it replaces.
func TestWorldRunHeadCols(t *testing.T) {
	if WorldRunHeadCols == WorldRunCols || strings.Contains(WorldRunHeadCols, "input") || strings.Contains(WorldRunHeadCols, "output") {
		t.Fatalf("WorldRunHeadCols = %s", WorldRunHeadCols)
	}
}
