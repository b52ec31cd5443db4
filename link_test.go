package weir_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestSDKLinksOnlyWhatItUses: a program of the SDK and its embedded store
// does not carry the World's rules, the server, the delivery of World
// messages or PostgreSQL's driver. The store's optional capabilities are
// methods the program never calls through an interface, so the linker
// leaves them out; this keeps it so.
func TestSDKLinksOnlyWhatItUses(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "sdkonly")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/sdkonly").CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/sdkonly: %v\n%s", err, out)
	}
	syms, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	for _, forbidden := range []string{
		`weir/world\.Decide`, `weir/store/apply\.WorldEvent`, `weir/store/apply\.Enqueue`,
		`weir/server\.`, `weir/delivery\.`, `jackc/pgx`, `sqlitestore\.\(\*Store\)\.WorldEvent`,
	} {
		if m := regexp.MustCompile(forbidden).Find(syms); m != nil {
			t.Errorf("the SDK-only binary links %s", m)
		}
	}
	// And it does link what it uses.
	if !regexp.MustCompile(`weir/store/apply\.Advance`).Match(syms) {
		t.Errorf("the SDK-only binary has no apply.Advance: is the check looking at the right binary?")
	}
}
