package bench

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill the child when the bench dies, even by
// SIGKILL: no orphaned weir server keeps claiming runs.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
