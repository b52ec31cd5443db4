//go:build !linux

package bench

import "os/exec"

// setDeathSignal does nothing here: only Linux kills a child with its
// parent. The bench kills its children itself on every path it returns by.
func setDeathSignal(*exec.Cmd) {}
