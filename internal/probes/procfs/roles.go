package procfs

// Attribution by role: how much of the job's host memory its main
// processes and its DataLoader workers hold (HostSample.MainBytes and
// WorkerBytes), so that after a host OOM the policy can follow what held
// the memory rather than the phase the output was in.

// roles sums the members' PSS (RSS where unread, as PSSBytes does) by role:
// a DataLoader-like worker by Workers' rule, every other member (the root,
// a launcher's ranks) main.
func (r *HostReader) roles() (main, workers uint64) {
	for i, st := range r.tree {
		hp := r.procs[st.PID]
		b := st.RSSBytes
		if hp != nil && hp.pssOK {
			b = uint64(max(0, int64(hp.pss)+int64(st.RSSBytes)-int64(hp.pssRSS)))
		}
		if i > 0 && r.isWorker(st) {
			workers += b
		} else {
			main += b
		}
	}
	return main, workers
}

// isWorker is Workers' rule for one member.
func (r *HostReader) isWorker(st Proc) bool {
	hp, parent := r.procs[st.PID], r.procs[st.PPID]
	if hp == nil || parent == nil || !isPythonName(hp.exe) || !isPythonName(parent.exe) {
		return false
	}
	return hp.cmdline != "" && hp.cmdline == parent.cmdline || isMultiprocessingChild(hp.cmdline)
}

// OtherBytes is what other processes held under the job's memory cgroup
// limit: its working set beyond the job's own processes. 0 without a
// cgroup limit: the machine's other processes do not share a limit with
// the job, and the kernel picks its victim by size.
func (h HostSample) OtherBytes() uint64 {
	if h.Cgroup == nil || h.Cgroup.LimitBytes == 0 {
		return 0
	}
	return h.Cgroup.WorkingSetBytes - min(h.TreeBytes(), h.Cgroup.WorkingSetBytes)
}
