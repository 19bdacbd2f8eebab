package attempt

import (
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// SignalName is "SIGINT" for SIGINT.
func SignalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return "signal " + strconv.Itoa(int(sig))
}
