package supervisor

import (
	"os"
	"strconv"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// Helpers of the tests here whose first users moved to package attempt.

// procInfo is what the tests here read of a process (see gone); the
// supervisor's own view of processes is in package attempt.
type procInfo struct {
	pid, ppid int
	state     byte
}

func (p procInfo) zombie() bool { return p.state == 'Z' || p.state == 'X' }

// readStat reads one process; ok is false when it is gone.
func readStat(pid int) (procInfo, bool) {
	p, err := procfs.ReadStat("/proc", pid)
	return procInfo{pid: p.PID, ppid: p.PPID, state: p.State}, err == nil
}

// listProcs reads every process in /proc.
func listProcs() []procInfo {
	ents, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if p, ok := readStat(pid); ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// splitAll runs data through a lines.Splitter, the reference for Scan.
func splitAll(data string) []string {
	var out []string
	sp := lines.New(0, func(l lines.Line) { out = append(out, string(l.Text)) })
	sp.Write([]byte(data))
	sp.Flush()
	return out
}
